// Conv -> MaxPool over windows as far apart as they are wide (LeNet's 2x2 stride-2 pool after its
// stem) becomes one Conv that pools its rows as it computes them (volt.max_pool: the window),
// where volt's few-channel loop (operators/cpu/conv_few_channels) takes the convolution in every
// plan: eight output channels over at most 32 values a pixel (input channels x taps), with
// AVX-512, fp32. The convolution's full result, four times the pooled map, is then never written
// out and read back: LeNet at batch 64 wrote 1.6 MiB and pooled it in a pass of its own, a tenth
// of its run.
//
// After the layout passes: both nodes must store their results alike (channels-last or in blocks,
// not channels-first, which the loop does not write) and X be stored channels-first or
// channels-last. The Conv has constant f32 weights, one group, no residual and an activation the
// loop applies (ReLU, LeakyRelu, Clip or none: all keep the maximum where it is); the MaxPool one
// output, no padding, dilation or ceil mode, and the Conv's result as its only input.
#include "operators/common/cpu_isa.hpp"
#include "operators/common/fused_activation.hpp"
#include "operators/common/layout.hpp"
#include "operators/registry.hpp"
#include "runtime/passes/passes.hpp"

namespace volt {
namespace {

bool all_equal_to(const std::vector<int64_t>& v, int64_t x) {
  for (int64_t e : v)
    if (e != x) return false;
  return true;
}

// The window of a MaxPool that the loop applies (two sizes, its strides the same, no padding,
// dilation, ceil mode or indices), or nothing.
std::optional<std::vector<int64_t>> foldable_window(const Node& pool) {
  if (!is_onnx_op(pool, "MaxPool") || pool.inputs.size() != 1 || pool.outputs.size() != 1)
    return std::nullopt;
  const std::vector<int64_t> kernel = pool.attr_ints("kernel_shape");
  if (kernel.size() != 2 || pool.attr_ints("strides") != kernel || kernel[0] < 1 || kernel[1] < 1)
    return std::nullopt;
  const std::string pad = pool.attr_string("auto_pad", "NOTSET");
  if ((pad != "NOTSET" && pad != "VALID") || !all_equal_to(pool.attr_ints("pads"), 0) ||
      !all_equal_to(pool.attr_ints("dilations"), 1) || pool.attr_int("ceil_mode", 0) != 0)
    return std::nullopt;
  return kernel;
}

// Whether the few-channel loop takes this convolution in every plan (conv_few_channels.hpp and
// Conv::few_channels): 2-D, f32 constant weights of eight output channels over at most 32 values
// a pixel, one group, no residual, an activation it applies, results not channels-first.
bool few_channel_conv(const Graph& g, const Node& conv) {
  if (!is_onnx_op(conv, "Conv") || conv.inputs.size() < 2 || conv.inputs.size() > 3 ||
      conv.attr_int("group", 1) != 1 || conv.has_attr("volt.max_pool") ||
      conv.attr_string("volt.algorithm", "direct") != "direct" ||
      conv.attr_string("volt.compute", "") != "")
    return false;
  const Tensor* w = constant_value(g, conv.inputs[1]);
  if (!w || w->dtype() != DType::Float || w->rank() != 4 || w->shape()[0] != 8 ||
      w->shape()[2] * w->shape()[3] < 2 || w->shape()[1] * w->shape()[2] * w->shape()[3] > 32)
    return false;
  using Kind = FusedActivation::Kind;
  const Kind act = FusedActivation::of(conv).kind;
  if (act != Kind::None && act != Kind::Relu && act != Kind::LeakyRelu && act != Kind::Clip)
    return false;
  const StoredLayout x = stored_input_layout(conv);
  return stored_layout(conv) != StoredLayout::ChannelsFirst &&
         (x == StoredLayout::ChannelsFirst || x == StoredLayout::ChannelsLast);
}

}  // namespace

Graph fuse_conv_max_pool(const Graph& graph) {
  if (!cpu_has_avx512()) return graph;  // (measured there: see Conv::few_channels)
  Graph g = graph;
  const ValueUses uses(g);
  std::vector<char> removed(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& conv = g.nodes[i];
    if (conv.outputs.size() != 1 || !few_channel_conv(g, conv)) continue;
    const auto reader = uses.sole_reader(conv.outputs[0]);
    if (!reader || removed[*reader]) continue;
    const Node& pool = g.nodes[*reader];
    const auto window = foldable_window(pool);
    if (!window || stored_layout(pool) != stored_layout(conv)) continue;
    conv.attributes["volt.max_pool"] = ints_attr(*window);
    conv.outputs[0] = pool.outputs[0];
    removed[*reader] = 1;
  }
  erase_marked(g.nodes, removed);
  return g;
}

}  // namespace volt
