// What the .cu files share: launch geometry, fp32 loads and stores of fp32 or fp16 storage, and
// block-wide reductions for one-block-per-row kernels.
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

// Block-wide sum and max through shared memory (blockDim.x a power of two, <= 1024).
__device__ inline float block_reduce(float v, bool max, float* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s)
      shared[threadIdx.x] = max ? fmaxf(shared[threadIdx.x], shared[threadIdx.x + s])
                                : shared[threadIdx.x] + shared[threadIdx.x + s];
    __syncthreads();
  }
  const float r = shared[0];
  __syncthreads();
  return r;
}

// Threads for a one-block-per-row kernel: a power of two from 32 up to 1024, no more than the
// row needs.
inline int row_threads(int64_t cols) {
  int t = 32;
  while (t < 1024 && t < cols) t *= 2;
  return t;
}

}  // namespace volt::cuda
