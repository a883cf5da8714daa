// Row-wise backward kernels: Softmax/LogSoftmax over the last axis and LayerNormalization. One
// block per row for the row's own sums (fp32), as the forward kernels in elementwise.cu.
#include <cuda_fp16.h>

#include <cmath>

#include "operators/cuda/device_kernels.hpp"
#include "operators/cuda/device_math.cuh"

namespace volt::cuda {
namespace {

// dx = y (dy - sum(dy y)) for softmax; dx = dy - exp(y) sum(dy) for log-softmax.
template <class T>
__global__ void softmax_grad_kernel(T* dx, const T* dy, const T* y, int64_t cols, bool log) {
  extern __shared__ float shared[];
  const int64_t base = blockIdx.x * cols;
  float acc = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    acc += log ? load(dy, base + c) : load(dy, base + c) * load(y, base + c);
  acc = block_reduce(acc, false, shared);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float g = load(dy, base + c), v = load(y, base + c);
    store(dx, base + c, log ? g - expf(v) * acc : v * (g - acc));
  }
}

// Per row: dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy * scale, and the row's mean
// and rstd kept for the column sums.
template <class T, class P>
__global__ void layer_norm_grad_rows(T* dx, float* stats, const T* dy, const T* x, const P* scale,
                                     int64_t cols, float epsilon) {
  extern __shared__ float shared[];
  const int64_t base = blockIdx.x * cols;
  const float n = static_cast<float>(cols);
  float sum = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += load(x, base + c);
  const float mean = block_reduce(sum, false, shared) / n;
  float sq = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float d = load(x, base + c) - mean;
    sq += d * d;
  }
  const float rstd = rsqrtf(block_reduce(sq, false, shared) / n + epsilon);
  float m1 = 0.f, m2 = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float g = load(dy, base + c) * load(scale, c);
    m1 += g;
    m2 += g * (load(x, base + c) - mean) * rstd;
  }
  m1 = block_reduce(m1, false, shared) / n;
  m2 = block_reduce(m2, false, shared) / n;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float xhat = (load(x, base + c) - mean) * rstd;
    store(dx, base + c, rstd * (load(dy, base + c) * load(scale, c) - m1 - xhat * m2));
  }
  if (threadIdx.x == 0) {
    stats[2 * blockIdx.x] = mean;
    stats[2 * blockIdx.x + 1] = rstd;
  }
}

// Per column: dscale = sum over rows of dy xhat, dbias = sum of dy.
template <class T, class P>
__global__ void layer_norm_grad_columns(P* dscale, P* dbias, const float* stats, const T* dy,
                                        const T* x, int64_t rows, int64_t cols) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < cols;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.f, b = 0.f;
    for (int64_t r = 0; r < rows; ++r) {
      const float g = load(dy, r * cols + c);
      s += g * (load(x, r * cols + c) - stats[2 * r]) * stats[2 * r + 1];
      b += g;
    }
    if (dscale) store(dscale, c, s);
    if (dbias) store(dbias, c, b);
  }
}

template <class T, class P>
void layer_norm_grad(void* dx, void* dscale, void* dbias, float* stats, const void* dy,
                     const void* x, const void* scale, int64_t rows, int64_t cols, float epsilon,
                     cudaStream_t s) {
  const int threads = row_threads(cols);
  layer_norm_grad_rows<<<static_cast<unsigned>(rows), threads, threads * sizeof(float), s>>>(
      static_cast<T*>(dx), stats, static_cast<const T*>(dy), static_cast<const T*>(x),
      static_cast<const P*>(scale), cols, epsilon);
  layer_norm_grad_columns<<<blocks_for(cols), kThreads, 0, s>>>(
      static_cast<P*>(dscale), static_cast<P*>(dbias), stats, static_cast<const T*>(dy),
      static_cast<const T*>(x), rows, cols);
}

}  // namespace

void launch_softmax_grad(Elem t, void* dx, const void* dy, const void* y, int64_t rows,
                         int64_t cols, bool log, void* stream) {
  if (rows == 0 || cols == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  const int threads = row_threads(cols);
  const size_t shared = threads * sizeof(float);
  if (t == Elem::F32)
    softmax_grad_kernel<<<static_cast<unsigned>(rows), threads, shared, s>>>(
        static_cast<float*>(dx), static_cast<const float*>(dy), static_cast<const float*>(y), cols,
        log);
  else
    softmax_grad_kernel<<<static_cast<unsigned>(rows), threads, shared, s>>>(
        static_cast<__half*>(dx), static_cast<const __half*>(dy), static_cast<const __half*>(y),
        cols, log);
}

void launch_layer_norm_grad(Elem t, Elem scale_type, void* dx, void* dscale, void* dbias,
                            float* stats, const void* dy, const void* x, const void* scale,
                            int64_t rows, int64_t cols, float epsilon, void* stream) {
  if (cols == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (rows == 0) {  // no rows: the parameter gradients are zero
    if (dscale) launch_fill(scale_type, dscale, cols, 0.f, stream);
    if (dbias) launch_fill(scale_type, dbias, cols, 0.f, stream);
    return;
  }
  if (t == Elem::F32 && scale_type == Elem::F32)
    layer_norm_grad<float, float>(dx, dscale, dbias, stats, dy, x, scale, rows, cols, epsilon, s);
  else if (t == Elem::F16 && scale_type == Elem::F32)
    layer_norm_grad<__half, float>(dx, dscale, dbias, stats, dy, x, scale, rows, cols, epsilon, s);
  else if (t == Elem::F16)
    layer_norm_grad<__half, __half>(dx, dscale, dbias, stats, dy, x, scale, rows, cols, epsilon, s);
  else
    layer_norm_grad<float, __half>(dx, dscale, dbias, stats, dy, x, scale, rows, cols, epsilon, s);
}

}  // namespace volt::cuda
