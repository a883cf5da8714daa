// What the .cu files share: launch geometry and fp32 loads and stores of fp32 or fp16 storage.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

namespace volt::cuda {

constexpr int kThreads = 256;

inline int blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

template <class T>
__device__ inline float load(const T* p, int64_t i) {
  return static_cast<float>(p[i]);
}
template <>
__device__ inline float load<__half>(const __half* p, int64_t i) {
  return __half2float(p[i]);
}
template <class T>
__device__ inline void store(T* p, int64_t i, float v) {
  p[i] = static_cast<T>(v);
}
template <>
__device__ inline void store<__half>(__half* p, int64_t i, float v) {
  p[i] = __float2half_rn(v);
}

}  // namespace volt::cuda
