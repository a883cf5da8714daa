// Questions passes ask about a graph: who reads a value, what a constant holds, what rank a
// value is declared with; and the one way passes make new nodes.
#include <algorithm>
#include <limits>

#include <map>
#include "runtime/compiled_graph.hpp"

#include <cmath>

#include "runtime/passes/passes.hpp"

namespace volt {

ValueUses::ValueUses(const Graph& g) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if (!n.inputs[k].empty()) readers_[n.inputs[k]].push_back({i, k});
    for (const auto& [_, a] : n.attributes) {
      // Values read inside subgraphs count as readers too (slot kSubgraph).
      std::vector<std::shared_ptr<Graph>> subs = a.graphs;
      if (a.g) subs.push_back(a.g);
      for (const auto& sg : subs)
        for (const auto& name : free_values(*sg)) readers_[name].push_back({i, kSubgraph});
    }
    for (const auto& o : n.outputs)
      if (!o.empty()) producer_[o] = i;
  }
  for (const auto& o : g.outputs) outputs_.insert(o.name);
}

const std::vector<ValueUses::Reader>& ValueUses::readers(const std::string& v) const {
  static const std::vector<Reader> none;
  auto it = readers_.find(v);
  return it == readers_.end() ? none : it->second;
}

std::optional<size_t> ValueUses::producer(const std::string& v) const {
  auto it = producer_.find(v);
  if (it == producer_.end()) return std::nullopt;
  return it->second;
}

std::optional<size_t> ValueUses::sole_reader(const std::string& v) const {
  const auto& r = readers(v);
  if (r.size() != 1 || r[0].slot == kSubgraph || is_graph_output(v)) return std::nullopt;
  return r[0].node;
}

const Tensor* constant_value(const Graph& g, const std::string& name) {
  auto it = g.initializers.find(name);
  if (it != g.initializers.end()) return &it->second;
  for (const Node& n : g.nodes)
    if (n.op_type == "Constant" && n.domain == kOnnxDomain && n.outputs.size() == 1 &&
        n.outputs[0] == name) {
      auto a = n.attributes.find("value");
      return a != n.attributes.end() && a->second.type == Attribute::Type::Tensor ? &a->second.t
                                                                                  : nullptr;
    }
  return nullptr;
}

bool is_onnx_op(const Node& n, const char* op) {
  return n.op_type == op && n.domain == kOnnxDomain;
}

const Tensor* constant_float_input(const Graph& g, const Node& n, size_t slot, size_t rank) {
  if (!n.has_input(slot)) return nullptr;
  const Tensor* t = constant_value(g, n.inputs[slot]);
  return t && t->dtype() == DType::Float && t->rank() == rank ? t : nullptr;
}

bool all_of_ints(const std::vector<int64_t>& v, int64_t want) {
  return std::all_of(v.begin(), v.end(), [&](int64_t x) { return x == want; });
}

bool nhwc_conv_with_constant_weights(const Graph& g, const Node& n, bool residual) {
  return is_onnx_op(n, "Conv") && n.attr_string("volt.layout", "") == "NHWC" &&
         !n.has_attr("volt.input_layout") && !n.has_attr("volt.compute") &&
         n.inputs.size() <= (residual ? 4u : 3u) && n.outputs.size() == 1 &&
         constant_float_input(g, n, 1, 4) && (!n.has_input(2) || constant_float_input(g, n, 2, 1));
}

bool nhwc_pointwise_conv(const Graph& g, const Node& n, int64_t channels, bool residual) {
  if (!nhwc_conv_with_constant_weights(g, n, residual)) return false;
  const Shape& w = constant_float_input(g, n, 1, 4)->shape();
  const std::string pad = n.attr_string("auto_pad", "NOTSET");
  return w[1] == channels && w[2] == 1 && w[3] == 1 && n.attr_int("group", 1) == 1 &&
         all_of_ints(n.attr_ints("strides"), 1) && all_of_ints(n.attr_ints("pads"), 0) &&
         (pad == "NOTSET" || pad == "VALID");
}

// A float scalar the graph holds as a constant, if `name` is one.
std::optional<float> constant_scalar(const Graph& g, const std::string& name) {
  const Tensor* t = constant_value(g, name);
  if (!t || t->numel() != 1) return std::nullopt;
  switch (t->dtype()) {  // fp16 and fp64 models hold their constants in their own type
    case DType::Float:
      return t->data<float>()[0];
    case DType::Float16:
      return static_cast<float>(t->data<Float16>()[0]);
    case DType::Double:
      return static_cast<float>(t->data<double>()[0]);
    default:
      return std::nullopt;
  }
}

std::map<std::string, Attribute> activation_attributes(const Graph& g, const Node& act) {
  std::map<std::string, Attribute> out;
  Attribute kind;
  kind.type = Attribute::Type::String;
  if (is_onnx_op(act, "Relu")) {
    kind.s = "Relu";
  } else if (is_onnx_op(act, "LeakyRelu")) {
    kind.s = "LeakyRelu";
    out["volt.alpha"] = float_attr(act.attr_float("alpha", 0.01f));
  } else if (is_onnx_op(act, "Gelu")) {
    const std::string approximate = act.attr_string("approximate", "none");
    if (approximate != "none" && approximate != "tanh") return {};
    kind.s = approximate == "tanh" ? "GeluTanh" : "Gelu";
  } else if (is_onnx_op(act, "Sigmoid") || is_onnx_op(act, "Tanh") ||
             is_onnx_op(act, "HardSwish")) {
    kind.s = act.op_type;
  } else if (is_onnx_op(act, "Elu")) {
    kind.s = "Elu";
    out["volt.alpha"] = float_attr(act.attr_float("alpha", 1.0f));
  } else if (is_onnx_op(act, "HardSigmoid")) {
    kind.s = "HardSigmoid";
    out["volt.alpha"] = float_attr(act.attr_float("alpha", 0.2f));
    out["volt.beta"] = float_attr(act.attr_float("beta", 0.5f));
  } else if (is_onnx_op(act, "Clip")) {
    float lo = std::numeric_limits<float>::lowest(), hi = std::numeric_limits<float>::max();
    if (act.opset < 11) {
      lo = act.attr_float("min", lo);
      hi = act.attr_float("max", hi);
    } else {
      for (size_t i = 1; i < act.inputs.size(); ++i) {
        if (act.inputs[i].empty()) continue;
        const auto v = constant_scalar(g, act.inputs[i]);
        if (!v) return {};  // a bound computed at run time
        (i == 1 ? lo : hi) = *v;
      }
    }
    if (!(lo <= hi)) return {};  // NaN or crossed bounds: leave ONNX's semantics to Clip
    kind.s = "Clip";
    out["volt.alpha"] = float_attr(lo);
    out["volt.beta"] = float_attr(hi);
  } else {
    return {};
  }
  out["volt.activation"] = kind;
  return out;
}

std::optional<GatedActivation> gated_activation(const Graph& g, const ValueUses& uses,
                                                const std::string& v) {
  const auto& readers = uses.readers(v);
  if (readers.size() != 2 || uses.is_graph_output(v)) return std::nullopt;
  for (int gate_first = 0; gate_first < 2; ++gate_first) {
    const auto& gr = readers[gate_first ? 0 : 1];
    const auto& mr = readers[gate_first ? 1 : 0];
    if (gr.slot == ValueUses::kSubgraph || mr.slot == ValueUses::kSubgraph) continue;
    const Node& gate = g.nodes[gr.node];
    const Node& mul = g.nodes[mr.node];
    if (gate.outputs.size() != 1 || !is_onnx_op(mul, "Mul") || mul.inputs.size() != 2) continue;
    const std::string& s = gate.outputs[0];
    if (uses.sole_reader(s) != mr.node ||
        !((mul.inputs[0] == v && mul.inputs[1] == s) || (mul.inputs[1] == v && mul.inputs[0] == s)))
      continue;
    std::string kind;
    if (is_onnx_op(gate, "Sigmoid")) kind = "Swish";
    // x * HardSigmoid(x) with ONNX HardSwish's parameters (1/6, 1/2), as converters write it.
    if (is_onnx_op(gate, "HardSigmoid") &&
        std::abs(gate.attr_float("alpha", 0.2f) - 1.0f / 6.0f) < 1e-6f &&
        gate.attr_float("beta", 0.5f) == 0.5f)
      kind = "HardSwish";
    if (kind.empty()) continue;
    GatedActivation out{{}, gr.node, mr.node};
    Attribute a;
    a.type = Attribute::Type::String;
    a.s = kind;
    out.attributes["volt.activation"] = a;
    return out;
  }
  return std::nullopt;
}

int declared_rank(const Graph& g, const std::string& name) {
  auto it = g.initializers.find(name);
  if (it != g.initializers.end()) return static_cast<int>(it->second.rank());
  const ValueInfo* v = declared_value(g, name);
  return v && v->has_shape ? static_cast<int>(v->shape.size()) : -1;
}

const ValueInfo* declared_value(const Graph& g, const std::string& name) {
  for (const auto* list : {&g.inputs, &g.value_info})
    for (const ValueInfo& v : *list)
      if (v.name == name) return &v;
  return nullptr;
}

std::set<std::string> value_names(const Graph& g) {
  std::set<std::string> names;
  for (const Node& node : g.nodes)
    for (const auto& o : node.outputs) names.insert(o);
  for (const auto& v : g.inputs) names.insert(v.name);
  return names;
}

std::string unique_name(const Graph& g, const std::set<std::string>& taken, std::string base) {
  std::string name = base;
  for (int k = 1; taken.count(name) || g.is_initializer(name); ++k)
    name = base + "." + std::to_string(k);
  return name;
}

Node* PatternRewrite::sole_reader(const std::string& v, const char* op) {
  const auto r = uses_.sole_reader(v);
  if (!r || removed_[*r]) return nullptr;
  Node& n = g_.nodes[*r];
  return !op || is_onnx_op(n, op) ? &n : nullptr;
}

void PatternRewrite::replace(const Node* at, Node n) {
  const size_t i = index(at);
  g_.nodes[i] = std::move(n);
  removed_[i] = 0;
}

Graph PatternRewrite::finish() {
  erase_marked(g_.nodes, removed_);
  return std::move(g_);
}

void erase_marked(std::vector<Node>& nodes, const std::vector<char>& marked) {
  std::vector<Node> kept;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (!marked[i]) kept.push_back(std::move(nodes[i]));
  nodes = std::move(kept);
}

void copy_conv_geometry(const Node& from, Node& to) {
  for (const char* a : {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"})
    if (from.attributes.count(a)) to.attributes[a] = from.attributes.at(a);
}

Node make_node(const std::string& name, const std::string& op, std::vector<std::string> ins,
               std::vector<std::string> outs, int opset) {
  Node n;
  n.name = name;
  n.op_type = op;
  n.opset = opset;
  n.inputs = std::move(ins);
  n.outputs = std::move(outs);
  return n;
}

Node cast_node(const std::string& in, const std::string& out, DType to) {
  Node c = make_node(out, "Cast", {in}, {out}, 13);
  Attribute a;
  a.type = Attribute::Type::Int;
  a.i = static_cast<int64_t>(to);
  c.attributes["to"] = a;
  return c;
}

void cast_graph_boundary(Graph& g, const Graph& original, DType outer, DType inner,
                         const std::string& suffix) {
  std::map<std::string, std::string> renamed;
  for (const ValueInfo& in : g.inputs)
    if (in.dtype == outer && in.kind == ValueInfo::Kind::Tensor && !g.is_initializer(in.name))
      renamed[in.name] = in.name + "@" + suffix;
  for (Node& n : g.nodes)
    for (auto& in : n.inputs)
      if (renamed.count(in)) in = renamed.at(in);
  for (const auto& [name, cast] : renamed) g.nodes.push_back(cast_node(name, cast, inner));
  for (const ValueInfo& out : g.outputs) {
    if (out.dtype != outer || out.kind != ValueInfo::Kind::Tensor || renamed.count(out.name))
      continue;
    const std::string inside = out.name + "@" + suffix;
    bool produced = false;
    for (Node& n : g.nodes)
      for (auto& o : n.outputs)
        if (o == out.name) {
          o = inside;
          produced = true;
        }
    auto weight = original.initializers.find(out.name);
    if (!produced && weight == original.initializers.end()) continue;
    for (Node& n : g.nodes)
      for (auto& in : n.inputs)
        if (in == out.name) in = inside;
    if (produced) {
      g.nodes.push_back(cast_node(inside, out.name, outer));
    } else {
      g.initializers[inside] = g.initializers.at(out.name);
      g.initializers[out.name] = weight->second;
    }
  }
}

}  // namespace volt
