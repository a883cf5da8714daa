#include "operators/cpu/resize_stored_channels.hpp"

#include <algorithm>
#include <cstring>

#include "operators/common/float_vectors.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/simd_clones.hpp"

namespace volt {
namespace {

// One input row resized along the width: `ow` pixels of `channels` floats, each the weighted sum
// of its `kx` column taps' pixels, 8 channels at a time in a register. Where channels are not a
// multiple of 8 (but at least 8), the last chunk overlaps the one before (what it writes again
// is the same).
VOLT_SIMD_CLONES void resize_along_width(const float* row, int64_t channels,
                                         const int64_t* col_index, const float* col_weight,
                                         int64_t kx, int64_t ow, float* out) {
  for (int64_t o = 0; o < ow; ++o) {
    const int64_t* cx = col_index + o * kx;
    const float* wx = col_weight + o * kx;
    float* pixel = out + o * channels;
    if (channels < 8) {
      for (int64_t c = 0; c < channels; ++c) {
        float sum = 0.0f;
        for (int64_t j = 0; j < kx; ++j) sum += wx[j] * row[cx[j] * channels + c];
        pixel[c] = sum;
      }
      continue;
    }
    for (int64_t c0 = 0; c0 < channels; c0 += 8) {
      const int64_t c = std::min(c0, channels - 8);
      Floats8 acc = {};
      for (int64_t j = 0; j < kx; ++j) {
        Floats8 x;
        load8(x, row + cx[j] * channels + c);
        acc += wx[j] * x;
      }
      store8(pixel + c, acc);
    }
  }
}

// One output row: the weighted sum of `ky` rows of `length` floats resized along the width.
VOLT_SIMD_CLONES void blend_rows(const float* const* rows, const float* weights, int64_t ky,
                                 int64_t length, float* out) {
  int64_t i = 0;
  for (; i + 8 <= length; i += 8) {
    Floats8 acc = {};
    for (int64_t t = 0; t < ky; ++t) {
      Floats8 x;
      load8(x, rows[t] + i);
      acc += weights[t] * x;
    }
    store8(out + i, acc);
  }
  for (; i < length; ++i) {
    float sum = 0.0f;
    for (int64_t t = 0; t < ky; ++t) sum += weights[t] * rows[t][i];
    out[i] = sum;
  }
}

}  // namespace

// Separable, like the channels-first plane kernel: each band of output rows first resizes the
// input rows it reads along the width into a buffer, then blends them (contiguous rows, every
// value a register's lane). Per output pixel of a 2x linear resize that is 2 + 2 vector
// operations per 8 channels where summing its 4 taps directly took 4, and the vertical pass has
// no per-pixel bookkeeping (blocks of 8 channels made that the cost). Bands keep both cores busy
// on one image at batch 1.
void resize_stored_channels(const float* x, float* y, int64_t images, int64_t ih, int64_t iw,
                            int64_t channels, const AxisTaps& rows, const AxisTaps& cols) {
  const int64_t oh = static_cast<int64_t>(rows.index.size()) / rows.k;
  const int64_t ow = static_cast<int64_t>(cols.index.size()) / cols.k;
  const int64_t row_pitch = iw * channels, out_row = ow * channels;
  const bool parallel = images * oh * out_row > 16384;
  if (rows.copy && cols.copy) {  // nearest: a gather of whole pixels
    const size_t pixel_bytes = static_cast<size_t>(channels) * sizeof(float);
    parallel_for(images * oh, parallel, [&](int64_t r) {
      const float* row = x + (r / oh) * ih * row_pitch + rows.index[r % oh] * row_pitch;
      float* dst = y + r * out_row;
      for (int64_t o = 0; o < ow; ++o)
        std::memcpy(dst + o * channels, row + cols.index[o] * channels, pixel_bytes);
    });
    return;
  }
  constexpr int64_t kMinTasks = 8;  // a few per thread, for balance
  const int64_t bands = std::clamp<int64_t>((kMinTasks + images - 1) / images, 1, oh);
  const int64_t band_rows = (oh + bands - 1) / bands;
  parallel_for(images * bands, parallel, [&](int64_t task) {
    const int64_t image = task / bands;
    const int64_t oy0 = (task % bands) * band_rows, oy1 = std::min(oh, oy0 + band_rows);
    if (oy0 >= oy1) return;
    const int64_t* ry = rows.index.data();
    const int64_t first = *std::min_element(ry + oy0 * rows.k, ry + oy1 * rows.k);
    const int64_t last = *std::max_element(ry + oy0 * rows.k, ry + oy1 * rows.k);
    // (Rows the band does not read, between those it does when it shrinks the image, are left
    // unset.)
    std::vector<char> read(static_cast<size_t>(last - first + 1), 0);
    for (const int64_t* t = ry + oy0 * rows.k; t != ry + oy1 * rows.k; ++t) read[*t - first] = 1;
    std::vector<float> buffer(static_cast<size_t>((last - first + 1) * out_row));
    const float* src = x + image * ih * row_pitch;
    for (int64_t iy = first; iy <= last; ++iy)
      if (read[iy - first])
        resize_along_width(src + iy * row_pitch, channels, cols.index.data(), cols.weight.data(),
                           cols.k, ow, buffer.data() + (iy - first) * out_row);
    std::vector<const float*> taps(static_cast<size_t>(rows.k));
    for (int64_t oy = oy0; oy < oy1; ++oy) {
      for (int64_t t = 0; t < rows.k; ++t)
        taps[t] = buffer.data() + (ry[oy * rows.k + t] - first) * out_row;
      blend_rows(taps.data(), rows.weight.data() + oy * rows.k, rows.k, out_row,
                 y + (image * oh + oy) * out_row);
    }
  });
}

}  // namespace volt
