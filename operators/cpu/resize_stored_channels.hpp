// Resize of images stored channels-last (N x H x W x C) or in blocks of channels (N x C/b x H x W
// x b, the same loop with N x C/b images of b channels): each output pixel is the weighted sum of
// its taps' pixels, a pixel's channels contiguous.
#pragma once
#include <cstdint>
#include <vector>

namespace volt {

// The taps of one axis: `k` (input index, weight) pairs per output coordinate, zero weights
// padding the shorter ones; `copy` where each is one tap of weight 1 (nearest).
struct AxisTaps {
  int64_t k = 1;
  std::vector<int64_t> index;
  std::vector<float> weight;
  bool copy = true;
};

// `images` images of ih x iw pixels of `channels` contiguous floats from x into y, resized
// along rows and columns by their taps.
void resize_stored_channels(const float* x, float* y, int64_t images, int64_t ih, int64_t iw,
                            int64_t channels, const AxisTaps& rows, const AxisTaps& cols);

}  // namespace volt
