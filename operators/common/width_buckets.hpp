// Widths in buckets, for plans built for one of several input shapes (InferContext::shapes_vary).
// oneDNN generates a convolution's code for its exact shape (0.3-0.7 ms for each of a text-line
// recognizer's 3x3 convolutions at every new width). Such a plan runs the primitive made for
// the bucket that holds its output width, on a copy of X widened with zeros, and keeps the
// first columns of the result: the zeros stand where the right padding was, so those columns are
// exactly the convolution's. A few buckets serve every width, their primitives kept for the
// session; the price is the copies and the columns computed past the real width.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "operators/common/parallel.hpp"

namespace volt {

// The bucket of width w: w rounded up to a multiple of 8 below 64, and to a quarter of its power
// of two above (64, 80, 96, 112, 128, 160, ...): at most 25% more columns, four buckets per
// doubling.
inline int64_t bucket_width(int64_t w) {
  int64_t step = 8;
  while (step * 8 <= w) step *= 2;  // (step = a quarter of the power of two below w, from 64 on)
  return (w + step - 1) / step * step;
}

// `rows` rows of `width` groups of `inner` floats into rows of `padded` groups, zeros after.
inline void widen_rows(const float* src, float* dst, int64_t rows, int64_t width, int64_t padded,
                       int64_t inner) {
  const int64_t from = width * inner, to = padded * inner;
  parallel_for(rows, rows * to > 65536, [&](int64_t r) {
    std::memcpy(dst + r * to, src + r * from, static_cast<size_t>(from) * sizeof(float));
    std::fill(dst + r * to + from, dst + (r + 1) * to, 0.0f);
  });
}

// The first `width` groups of `inner` floats of each of `rows` rows of `padded` groups.
inline void narrow_rows(const float* src, float* dst, int64_t rows, int64_t padded, int64_t width,
                        int64_t inner) {
  const int64_t from = padded * inner, to = width * inner;
  parallel_for(rows, rows * to > 65536, [&](int64_t r) {
    std::memcpy(dst + r * to, src + r * from, static_cast<size_t>(to) * sizeof(float));
  });
}

}  // namespace volt
