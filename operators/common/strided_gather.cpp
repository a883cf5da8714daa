#include "operators/common/strided_gather.hpp"

#include <algorithm>
#include <cstdint>

#include "operators/common/simd_clones.hpp"

namespace volt {
namespace {

// One channel count at a time, so that the compiler sees the stores' pattern.
template <int kChannels>
inline void interleave(const uint32_t* __restrict s, uint32_t* __restrict o, int64_t len,
                       int64_t stride) {
  for (int64_t j = 0; j < len; ++j)
    for (int c = 0; c < kChannels; ++c) o[j * kChannels + c] = s[c * stride + j];
}

}  // namespace

VOLT_SIMD_CLONES void transpose_4byte(const void* src, void* dst, int64_t rows, int64_t cols,
                                      int64_t src_stride, int64_t dst_stride) {
  const auto* s = static_cast<const uint32_t*>(src);
  auto* o = static_cast<uint32_t*>(dst);
  // Tiles of 16 x 16: each of a tile's source rows is one cache line, each destination row's
  // 16 elements one line written over the tile's 16 steps, all of it in L1.
  constexpr int64_t kTile = 16;
  for (int64_t c0 = 0; c0 < cols; c0 += kTile)
    for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
      const int64_t c1 = std::min(cols, c0 + kTile), r1 = std::min(rows, r0 + kTile);
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = r0; r < r1; ++r) o[r * dst_stride + c] = s[c * src_stride + r];
    }
}

VOLT_SIMD_CLONES void interleave_4byte(const void* src, void* dst, int64_t len, int64_t stride,
                                       int64_t channels) {
  const auto* s = static_cast<const uint32_t*>(src);
  auto* o = static_cast<uint32_t*>(dst);
  switch (channels) {
    case 2:
      return interleave<2>(s, o, len, stride);
    case 3:
      return interleave<3>(s, o, len, stride);
    default:
      return interleave<4>(s, o, len, stride);
  }
}

}  // namespace volt
