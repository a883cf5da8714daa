// ConvTranspose as a product and a gather: Z = a 1x1 convolution of X to K x M channels (K =
// kh x kw taps; grouped as the deconvolution, Z's channel g x K x M/G + tap x M/G + m for the
// output channel g x M/G + m of group g), then each output pixel sums, for every tap whose input
// position it receives, that tap's channels of Z at that position (col2im by output rows, so
// that no two threads add into one output). Where the kernel equals the strides without
// padding or dilation every output has exactly one tap: a permutation of Z. Y is channels-last
// or in blocks of B channels, Z in the same layout, and a tap's channels of one group are
// contiguous in Z's pixel (channels-last) or whole blocks (blocked: M/G a multiple of B).
#pragma once
#include <cstdint>
#include <vector>

#include "operators/common/fused_activation.hpp"
#include "operators/cpu/conv_transpose_geometry.hpp"

namespace volt {

// For each output position of one spatial axis, the taps that reach it: (kernel index, input
// position) pairs, items[start[o] .. start[o + 1]).
struct TapList {
  std::vector<int64_t> start;
  std::vector<std::pair<int64_t, int64_t>> items;
};

// `len` channels of Y's run from `src` floats past a pixel of Z (blocks: past the pixel in the
// first block of channels).
struct TapSegment {
  int64_t dst, src, len;
};

struct TapGather {
  int64_t n = 0, m = 0, group_m = 0, taps = 0, kw = 0, in_h = 0, in_w = 0, out_h = 0, out_w = 0;
  // Y as runs of `run` channels ([N, M / run, OH, OW, run]: run = M channels-last, B blocked);
  // Z's pixels `z_pixel` floats apart, its images `z_image` apart.
  int64_t runs = 0, run = 0, z_pixel = 0, z_image = 0;
  TapList rows;  // (the columns the gather steps itself, from these:)
  int64_t stride_w = 1, dilation_w = 1, pad_w = 0;
  bool one_tap_each = false;  // every output position receives exactly one tap
  // For run r and tap t, segments[seg_start[r x K + t] .. seg_start[r x K + t + 1]).
  std::vector<int64_t> seg_start;
  std::vector<TapSegment> segments;
};

// 2-D geometry; `block` 0 for channels-last. Empty (runs == 0) where a group's channels are not
// whole blocks.
TapGather tap_gather(const DeconvGeometry& g, int64_t block);

// y = act(bias + the sum of its taps' values in z); `bias` may be null, `act` None.
void gather_taps(const TapGather& p, const float* z, const float* bias, const FusedActivation& act,
                 float* y);

}  // namespace volt
