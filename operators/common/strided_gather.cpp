#include "operators/common/strided_gather.hpp"

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
