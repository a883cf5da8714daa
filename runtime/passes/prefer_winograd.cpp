// Marks the convolutions Winograd's algorithm suits (2-D, 3×3, stride 1, any dilation, one group,
// at least 8 input and 8 output channels, constant fp32 weights) with volt.algorithm =
// "winograd"; the Conv kernel then runs volt's (operators/cpu/conv_winograd.hpp), or where that
// declines asks oneDNN for its own (AVX-512, undilated), or else takes the direct algorithm. In
// the list only while SessionOptions::winograd is on.
#include "runtime/passes/passes.hpp"

namespace volt {
namespace {

// Fewer channels: the tile transforms cost more than the multiplications saved.
constexpr int64_t kMinInputChannels = 8, kMinOutputChannels = 8;

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
    // Measured with volt's kernel on a Zen 4, 2 threads, p50 against a floor of 64 in and out
    // (AVX-512 / oneDNN held to AVX2): resize_scales b8 (64 -> 32, 32 -> 16, 16 -> 8 at 56-224
    // pixels a side) 25.4 -> 16.1 / 29.3 -> 24.7 ms, SqueezeNet 1.1 b8 (its 16 -> 64 .. 64 ->
    // 256 expand layers) 26.1 -> 21.5 / 33.5 -> 31.3, DenseNet-121 (128 -> 32) b1 29.5 -> 25.0
    // (floor 32 / 16), b8 230 -> 183. (opset9_upsample b8, which has no stride-1 3x3, moved 1.53
    // -> 1.68 / 6.87 -> 6.83 in the same runs: their noise.) From 16 to 8 input channels: the
    // LeNet-style CNN of models/ (8 -> 16 on 14x14, batch 64), 5 alternating pairs swapping
    // libvolt under one binary, 0.438 / 0.428 / 0.452 / 0.443 / 0.341 -> 0.390 / 0.389 / 0.420 /
    // 0.403 / 0.298 ms.
    if (w->second.shape()[0] < kMinOutputChannels || w->second.shape()[1] < kMinInputChannels)
      continue;
    if (n.attr_int("group", 1) != 1 || !all_ones(n, "strides")) continue;
    // (Dilated kernels too, FCN's and DeepLab's ResNet backbones: volt's Winograd takes them,
    // one interleaved grid of X and Y at a time.)
    n.attributes["volt.algorithm"] = string_attr("winograd");
  }
  return g;
}

}  // namespace volt
