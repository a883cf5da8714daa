// A 2-D convolution that reads few values per output (input channels x kernel taps <= 32, a
// window of more than one tap: a model's stem over one to three image planes) as a direct loop: per
// output pixel, its patch of X times a [taps, M] weight matrix, vectorized over the output
// channels. It serves plans built for one of several input shapes (InferContext::shapes_vary):
// oneDNN generates a convolution's code for each problem shape, and the bucket of widths that
// avoids it (width_buckets.hpp) still makes a primitive for each new bucket: 0.17-0.3 ms for a
// text-line recognizer's 1 -> 32 3x3 stem at each new width, where the run at that width
// takes 1.5-3 ms. This loop needs no code generated and its weights are laid out once per session.
// (Conv also takes it for eight output channels in any plan: see Conv::few_channels.)
//
// X stored channels-first, channels-last or in blocks of 8 or 16 channels; Y channels-last or
// in blocks, with M a multiple of 8; f32, one group, constant weights, any strides, dilations
// and pads; the bias, and a fused ReLU, LeakyRelu or Clip, applied as the outputs are stored. A
// max pool over the result (volt.max_pool: runtime/passes/fuse_conv_max_pool.cpp) takes each
// pooled row's convolution rows from a buffer of the thread's own, so the full result is never
// written to Y and read back.
#pragma once
#include <cstdint>
#include <memory>

#include "operators/common/fused_activation.hpp"
#include "operators/common/layout.hpp"
#include "operators/cpu/conv_reference.hpp"
#include "operators/kernel.hpp"

namespace volt {

struct FewChannelConv : ConvWindow2d {
  static constexpr int64_t kMaxTaps = 32;  // input channels x kernel taps
  using ConvWindow2d::ConvWindow2d;
  int64_t m_padded = 0, taps = 0;
  StoredLayout x_layout = StoredLayout::ChannelsFirst, y_layout = StoredLayout::ChannelsLast;
  FusedActivation act;
  std::shared_ptr<const Tensor> weights;  // [taps][m_padded], tap t = (c kh + i) kw + j
  // A max pool over the result folded in (volt.max_pool: fuse_conv_max_pool), its windows
  // pool_kh x pool_kw, as far apart, without padding; Y is then the pooled map, pool_h x pool_w.
  // 0: none.
  int64_t pool_kh = 0, pool_kw = 0, pool_h = 0, pool_w = 0;
};

// The loop's plan for convolution `s` with constant weights `w` ([M, C, kh, kw]), or null where
// it does not apply (see above). With `only_if_planned`, also null unless an earlier plan of the
// node took the loop (its weights are in the node's memo): a plan specialized to a shape that a
// plan for several shapes ran first keeps the loop, so that runs at one shape give the same bits
// before and after specializing.
// With pool_kh > 0, Y is the result max-pooled in windows of pool_kh x pool_kw (see above).
std::shared_ptr<const FewChannelConv> plan_few_channel_conv(
    InferContext& ctx, const ConvShapes& s, const Tensor& w, const FusedActivation& act,
    StoredLayout x_layout, StoredLayout y_layout, bool only_if_planned, int64_t pool_kh = 0,
    int64_t pool_kw = 0);

// Y (stored as planned, pooled where planned so) from X (stored as planned) and the bias (M
// floats, or null).
void run_few_channel_conv(const FewChannelConv& p, const float* x, const float* bias, float* y);

}  // namespace volt
