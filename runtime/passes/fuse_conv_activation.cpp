// Conv -> activation, Conv -> Add -> activation and Conv -> Add become one Conv with oneDNN
// post-ops (residual as input 3; attributes volt.activation, volt.alpha, volt.beta), and
// ConvTranspose -> activation one ConvTranspose. The activations: Relu, LeakyRelu, and Clip with
// constant bounds (ReLU6 in MobileNets). Only where the intermediate values have no other reader
// and are not graph outputs.
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
    if (transposed) {  // the activation only (oneDNN's deconvolution takes eltwise post-ops)
      auto next = uses.sole_reader(out);
      if (!next || removed[*next]) continue;
      auto attrs = activation_attributes(g, g.nodes[*next]);
      if (attrs.empty()) continue;
      conv.attributes.merge(attrs);
      removed[*next] = 1;
      conv.outputs[0] = g.nodes[*next].outputs[0];
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
    if (next) {
      auto attrs = activation_attributes(g, g.nodes[*next]);
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
