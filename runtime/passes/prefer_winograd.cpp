// Marks the convolutions Winograd's algorithm suits (2-D, 3×3, stride 1, any dilation, one group,
// at least 64 input and output channels, constant fp32 weights) with volt.algorithm =
// "winograd"; the Conv kernel then runs volt's (operators/cpu/conv_winograd.hpp), or where that
// declines asks oneDNN for its own (AVX-512, undilated), or else takes the direct algorithm. In
// the list only while SessionOptions::winograd is on.
#include "runtime/passes/passes.hpp"

namespace volt {
namespace {

constexpr int64_t kMinChannels = 64;

bool all_ones(const Node& n, const char* attr) {
  for (int64_t v : n.attr_ints(attr, {}))
    if (v != 1) return false;
  return true;
}

}  // namespace

Graph prefer_winograd(const Graph& graph) {
  Graph g = graph;
  for (Node& n : g.nodes) {
    if (n.op_type != "Conv" || n.domain != kOnnxDomain || n.inputs.size() < 2) continue;
    auto w = g.initializers.find(n.inputs[1]);
    if (w == g.initializers.end() || w->second.dtype() != DType::Float ||
        w->second.shape().size() != 4 || w->second.shape()[2] != 3 || w->second.shape()[3] != 3)
      continue;
    // Few channels: the tile transforms cost more than the multiplications saved (a 1→8 3×3
    // convolution ran 9× slower by Winograd here; 64→64 ran 2× faster).
    if (w->second.shape()[0] < kMinChannels || w->second.shape()[1] < kMinChannels) continue;
    if (n.attr_int("group", 1) != 1 || !all_ones(n, "strides")) continue;
    // (Dilated kernels too, FCN's and DeepLab's ResNet backbones: volt's Winograd takes them,
    // one interleaved grid of X and Y at a time.)
    n.attributes["volt.algorithm"] = string_attr("winograd");
  }
  return g;
}

}  // namespace volt
