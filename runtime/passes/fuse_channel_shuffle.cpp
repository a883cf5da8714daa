// ShuffleNet's channel shuffle, Reshape X [N, C, H, W] to [N, g, C/g, H, W] -> Transpose
// (0, 2, 1, 3, 4) -> Reshape back to [N, C, H, W], becomes one ai.volt ChannelShuffle node
// (operators/cpu/channel_shuffle.cpp) with the two shapes as its inputs: exporters compute them
// from Shape, so only the plan knows them, and the kernel computes what the three nodes did for
// any shapes. One node lets use_channels_last keep the network channels-last through it (per
// pixel, a permutation of the channels); the three nodes were channels-first, and each of
// ShuffleNet's 16 units converted its output to channels-first and back around them.
//
// The two Reshapes without allowzero (opset 5 on), the intermediate values read by the next
// node alone and neither a graph output.
#include "operators/registry.hpp"
#include "runtime/passes/passes.hpp"

namespace volt {
namespace {

bool plain_reshape(const Node& n) {
  return is_onnx_op(n, "Reshape") && n.opset >= 5 && n.inputs.size() == 2 && !n.inputs[1].empty() &&
         n.outputs.size() == 1 && n.attr_int("allowzero", 0) == 0;
}

}  // namespace

Graph fuse_channel_shuffle(const Graph& graph) {
  PatternRewrite rw(graph);
  Graph& g = rw.graph();
  const ValueUses& uses = rw.uses();
  for (const Node& transpose : g.nodes) {
    if (rw.removed(&transpose) || !is_onnx_op(transpose, "Transpose") ||
        transpose.inputs.size() != 1 || transpose.outputs.size() != 1 ||
        transpose.attr_ints("perm") != std::vector<int64_t>{0, 2, 1, 3, 4})
      continue;
    auto p = uses.producer(transpose.inputs[0]);
    if (!p || !uses.sole_reader(transpose.inputs[0])) continue;
    const Node& split = g.nodes[*p];
    const Node* merge = rw.sole_reader(transpose.outputs[0], "Reshape");
    if (rw.removed(&split) || !plain_reshape(split) || !merge || !plain_reshape(*merge) ||
        merge->inputs[0] != transpose.outputs[0])
      continue;
    Node fused = make_node(transpose.name, "ChannelShuffle",
                           {split.inputs[0], split.inputs[1], merge->inputs[1]}, merge->outputs, 1);
    fused.domain = kVoltDomain;
    rw.remove(&split);
    rw.remove(&transpose);
    // At the second Reshape's place: its shape input exists by then.
    rw.replace(merge, std::move(fused));
  }
  return rw.finish();
}

}  // namespace volt
