// fp16 models on CPUs: a model stored in float16 (weights, activations, Casts at its boundary,
// as fp16 converters write it) computes in fp32, where oneDNN's primitives run at full speed and
// the CPU has no fp16 arithmetic; the inverse of use_fp16. fp16 initializers and Constant values
// become fp32 once, at session creation (exact: fp32 holds every fp16 value). Casts and the
// dtype attributes of generators to fp16 make fp32 instead. fp16 graph inputs enter through a
// Cast to fp32 (exact) and fp16 outputs leave through a Cast to fp16, so callers see the
// model's declared types; the rounding of that last Cast is the one the model's own ops would
// have done at its end. Intermediates are not rounded to fp16 between ops: results are at least
// as accurate as a runtime that computes each op in fp32 and rounds after it. Subgraph bodies
// are converted whole (their declared fp16 inputs and outputs become fp32, as their readers'
// are). A Cast from a value the graph declares fp16 to a float type becomes an Identity, which
// remove_identities then drops; a Cast to fp16 from anything else still rounds to fp16 (the
// model's boundary Cast, exactly as the model has it) and is followed by a Cast back to fp32.
#include "runtime/passes/passes.hpp"

namespace volt {
namespace {

constexpr auto kHalf = static_cast<int64_t>(DType::Float16);
constexpr auto kFloat = static_cast<int64_t>(DType::Float);

Tensor to_fp32(const Tensor& t) {
  Tensor f = Tensor::empty(DType::Float, t.shape());
  const Float16* src = t.data<Float16>();
  float* dst = f.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) dst[i] = static_cast<float>(src[i]);
  return f;
}

void widen(std::vector<ValueInfo>& infos) {
  for (ValueInfo& v : infos)
    if (v.dtype == DType::Float16) v.dtype = DType::Float;
}

bool holds_fp16(const Graph& g) {
  for (const auto& [name, t] : g.initializers)
    if (t.dtype() == DType::Float16) return true;
  for (const auto* infos : {&g.inputs, &g.outputs, &g.value_info})
    for (const ValueInfo& v : *infos)
      if (v.dtype == DType::Float16) return true;
  for (const Node& n : g.nodes) {
    if (n.attr_int("to", 0) == kHalf || n.attr_int("dtype", 0) == kHalf) return true;
    for (const auto& [key, a] : n.attributes) {
      if (a.type == Attribute::Type::Tensor && a.t.dtype() == DType::Float16) return true;
      if (a.type == Attribute::Type::Graph && a.g && holds_fp16(*a.g)) return true;
      if (a.type == Attribute::Type::Graphs)
        for (const auto& sub : a.graphs)
          if (sub && holds_fp16(*sub)) return true;
    }
  }
  return false;
}

// The element type the graph declares for `name` (initializer, input, value_info), if any.
DType declared_dtype(const Graph& g, const std::string& name) {
  if (auto it = g.initializers.find(name); it != g.initializers.end()) return it->second.dtype();
  for (const auto* infos : {&g.inputs, &g.value_info, &g.outputs})
    for (const ValueInfo& v : *infos)
      if (v.name == name && v.kind == ValueInfo::Kind::Tensor) return v.dtype;
  return DType::Undefined;
}

std::shared_ptr<Graph> converted_subgraph(const Graph& body);

// Everything inside `g`, its boundary aside: initializers, Constant values, the target types
// of Casts and generators, declared intermediate types, and subgraphs (boundary included).
void convert_body(Graph& g) {
  // Casts as the model has them, read before anything changes.
  std::vector<char> from_half(g.nodes.size(), 0), to_half(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!is_onnx_op(n, "Cast") || !n.has_input(0) || !n.has_output(0)) continue;
    from_half[i] = declared_dtype(g, n.inputs[0]) == DType::Float16;
    to_half[i] = n.attr_int("to", 0) == kHalf;
  }
  for (auto& [name, t] : g.initializers)
    if (t.dtype() == DType::Float16) t = to_fp32(t);
  widen(g.value_info);
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    for (auto& [key, a] : n.attributes) {
      if (a.type == Attribute::Type::Tensor && a.t.dtype() == DType::Float16) a.t = to_fp32(a.t);
      if (a.type == Attribute::Type::Int && a.i == kHalf && (key == "to" || key == "dtype"))
        a.i = kFloat;
      if (a.type == Attribute::Type::Graph && a.g) a.g = converted_subgraph(*a.g);
      if (a.type == Attribute::Type::Graphs)
        for (auto& sub : a.graphs)
          if (sub) sub = converted_subgraph(*sub);
    }
    if (from_half[i] && (to_half[i] || n.attr_int("to", 0) == kFloat)) {
      // fp16 -> fp32 is now fp32 -> fp32 (and fp16 -> fp16 was nothing): the value passes.
      n.op_type = "Identity";
      n.attributes.clear();
      n.input_type_group.clear();
    } else if (to_half[i]) {
      // A real narrowing (fp32, fp64 or an integer to fp16, or an input whose type the graph
      // does not declare): the value is rounded to fp16 as the model says, then held in fp32.
      const std::string out = n.outputs[0];
      n.attributes["to"].i = kHalf;
      n.outputs[0] = out + "@fp16";
      nodes.push_back(std::move(n));
      nodes.push_back(cast_node(out + "@fp16", out, DType::Float));
      continue;
    }
    nodes.push_back(std::move(n));
  }
  g.nodes = std::move(nodes);
}

std::shared_ptr<Graph> converted_subgraph(const Graph& body) {
  auto sub = std::make_shared<Graph>(body);
  convert_body(*sub);
  widen(sub->inputs);
  widen(sub->outputs);
  return sub;
}

}  // namespace

Graph compute_fp16_in_fp32(const Graph& graph) {
  if (!holds_fp16(graph)) return graph;
  Graph g = graph;
  convert_body(g);
  cast_graph_boundary(g, graph, DType::Float16, DType::Float, "fp32");
  return g;
}

}  // namespace volt
