// Conv -> activation, Conv -> Add -> activation and Conv -> Add become one Conv with oneDNN
// post-ops (residual as input 3; attributes volt.activation, volt.alpha, volt.beta), and
// ConvTranspose -> activation one ConvTranspose. The activations: those activation_attributes
// folds (Relu, LeakyRelu, Clip with constant bounds as MobileNets' ReLU6, Gelu, Sigmoid, Tanh,
// Elu, HardSigmoid, HardSwish), and x * Sigmoid(x) and x * HardSigmoid(x) as Swish and HardSwish
// (EfficientNet's SiLU, MobileNetV3's HardSwish as opset 13 exports them). Only where the
// intermediate values have no other reader and are not graph outputs. BatchNormalization ->
// Relu becomes a BatchNormalization with volt.activation = Relu.
#include "runtime/passes/passes.hpp"

namespace volt {

Graph fuse_conv_activation(const Graph& graph) {
  Graph g = graph;
  std::vector<char> removed(g.nodes.size(), 0);
  const ValueUses uses(g);
  for (Node& conv : g.nodes) {
    const bool transposed = is_onnx_op(conv, "ConvTranspose");
    if ((!is_onnx_op(conv, "Conv") && !transposed) || conv.outputs.size() != 1 ||
        conv.has_attr("volt.activation") || conv.inputs.size() > 3)
      continue;
    std::string out = conv.outputs[0];
    // The activation after `out`: one node, or x * gate(x) (Swish, HardSwish written out).
    auto absorb_activation = [&](std::optional<size_t> next) {
      if (next) {
        auto attrs = activation_attributes(g, g.nodes[*next]);
        if (attrs.empty()) return;
        conv.attributes.merge(attrs);
        removed[*next] = 1;
        out = g.nodes[*next].outputs[0];
        return;
      }
      auto gated = gated_activation(g, uses, out);
      if (!gated || removed[gated->gate] || removed[gated->mul]) return;
      conv.attributes.merge(gated->attributes);
      removed[gated->gate] = removed[gated->mul] = 1;
      out = g.nodes[gated->mul].outputs[0];
    };
    if (transposed) {  // the activation only (oneDNN's deconvolution takes eltwise post-ops)
      auto next = uses.sole_reader(out);
      if (next && removed[*next]) continue;
      absorb_activation(next);
      conv.outputs[0] = out;
      continue;
    }
    // A node another Conv already absorbed (the Add of two convolutions) is not fused twice.
    auto next = uses.sole_reader(out);
    if (next && removed[*next]) next.reset();
    if (next && is_onnx_op(g.nodes[*next], "Add") && g.nodes[*next].inputs.size() == 2 &&
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
    // A reader the loop removed already is someone else's (a residual Add): nothing to absorb.
    if (!(next && removed[*next])) absorb_activation(next);
    conv.outputs[0] = out;
  }
  // BatchNormalization (inference, one output) -> Relu: oneDNN's batch normalization applies
  // the Relu in the same pass (DenseNet's and pre-activation ResNets' BN -> Relu -> Conv).
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& bn = g.nodes[i];
    if (removed[i] || !is_onnx_op(bn, "BatchNormalization") || bn.outputs.size() != 1 ||
        bn.attr_int("training_mode", 0) != 0 || bn.has_attr("volt.activation"))
      continue;
    const auto next = uses.sole_reader(bn.outputs[0]);
    if (!next || removed[*next] || !is_onnx_op(g.nodes[*next], "Relu")) continue;
    bn.attributes["volt.activation"] = string_attr("Relu");
    removed[*next] = 1;
    bn.outputs[0] = g.nodes[*next].outputs[0];
  }
  erase_marked(g.nodes, removed);
  return g;
}

}  // namespace volt
