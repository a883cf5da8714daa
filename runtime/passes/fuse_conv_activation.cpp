// Conv -> activation, Conv -> Add -> activation and Conv -> Add become one Conv with oneDNN
// post-ops (residual as input 3; attributes volt.activation, volt.alpha, volt.beta). The
// activations: Relu, LeakyRelu, and Clip with constant bounds (ReLU6 in MobileNets). Only where
// the intermediate values have no other reader and are not graph outputs.
#include <limits>

#include "runtime/passes/passes.hpp"

namespace volt {

namespace {

bool is_op(const Node& n, const char* op) {
  return n.op_type == op && n.domain == kOnnxDomain;
}

// A float scalar the graph holds as a constant, if `name` is one.
std::optional<float> constant_scalar(const Graph& g, const std::string& name) {
  const Tensor* t = constant_value(g, name);
  if (!t || t->dtype() != DType::Float || t->numel() != 1) return std::nullopt;
  return t->data<float>()[0];
}

Attribute float_attr(float v) {
  Attribute a;
  a.type = Attribute::Type::Float;
  a.f = v;
  return a;
}

// The volt.* attributes that fold `act` into the op before it; empty when it cannot be folded.
std::map<std::string, Attribute> fused_attributes(const Graph& g, const Node& act) {
  std::map<std::string, Attribute> out;
  Attribute kind;
  kind.type = Attribute::Type::String;
  if (is_op(act, "Relu")) {
    kind.s = "Relu";
  } else if (is_op(act, "LeakyRelu")) {
    kind.s = "LeakyRelu";
    out["volt.alpha"] = float_attr(act.attr_float("alpha", 0.01f));
  } else if (is_op(act, "Clip")) {
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

}  // namespace

Graph fuse_conv_activation(const Graph& graph) {
  Graph g = graph;
  std::vector<char> removed(g.nodes.size(), 0);
  const ValueUses uses(g);
  for (Node& conv : g.nodes) {
    if (!is_op(conv, "Conv") || conv.outputs.size() != 1 || conv.has_attr("volt.activation") ||
        conv.inputs.size() > 3)
      continue;
    std::string out = conv.outputs[0];
    // A node another Conv already absorbed (the Add of two convolutions) is not fused twice.
    auto next = uses.sole_reader(out);
    if (next && removed[*next]) next.reset();
    if (next && is_op(g.nodes[*next], "Add") && g.nodes[*next].inputs.size() == 2 &&
        g.nodes[*next].inputs[0] != g.nodes[*next].inputs[1]) {
      const Node& add = g.nodes[*next];
      const std::string residual = add.inputs[0] == out ? add.inputs[1] : add.inputs[0];
      // Conv(x) + x stays an Add: the output may take the residual's buffer, which the
      // convolution still reads as x.
      if (residual == conv.inputs[0]) continue;
      // The residual must exist before the Conv runs; the planner's order guarantees it as an
      // input.
      conv.inputs.resize(3);
      conv.inputs.push_back(residual);
      removed[*next] = 1;
      out = add.outputs[0];
      next = uses.sole_reader(out);
      if (next && removed[*next]) next.reset();
    }
    if (next) {
      auto attrs = fused_attributes(g, g.nodes[*next]);
      if (!attrs.empty()) {
        conv.attributes.merge(attrs);
        removed[*next] = 1;
        out = g.nodes[*next].outputs[0];
      }
    }
    conv.outputs[0] = out;
  }
  erase_marked(g.nodes, removed);
  return g;
}

}  // namespace volt
