// Training kernels: elementwise derivatives, fills, Gather's scatter-add, BatchNormalization's
// running statistics.
// One thread per element (grid-stride), fp32 arithmetic for fp16 storage, as in elementwise.cu.
#include <cuda_fp16.h>

#include <cmath>

#include "operators/cuda/device_kernels.hpp"
#include "operators/cuda/device_math.cuh"

namespace volt::cuda {
namespace {

// f'(x) for y = f(x); the same formulas as the CPU's EltwiseGrad (operators/cpu/backward.cpp).
__device__ inline float derivative(GradFn f, float x, float y, float alpha) {
  constexpr float kPi = 3.14159265358979323846f;
  switch (f) {
    case GradFn::Relu:
      return x > 0.f ? 1.f : 0.f;
    case GradFn::LeakyRelu:
      return x >= 0.f ? 1.f : alpha;
    case GradFn::Elu:
      return x >= 0.f ? 1.f : y + alpha;
    case GradFn::Sigmoid:
      return y * (1.f - y);
    case GradFn::Tanh:
      return 1.f - y * y;
    case GradFn::Exp:
      return y;
    case GradFn::Log:
      return 1.f / x;
    case GradFn::Sqrt:
      return 0.5f / y;
    case GradFn::Reciprocal:
      return -y * y;
    case GradFn::Erf:
      return 2.f / sqrtf(kPi) * expf(-x * x);
    case GradFn::Softplus:
      return 1.f / (1.f + expf(-x));
    case GradFn::Abs:
      return x > 0.f ? 1.f : (x < 0.f ? -1.f : 0.f);
    case GradFn::Sin:
      return cosf(x);
    case GradFn::Cos:
      return -sinf(x);
    case GradFn::Clip:
      return x == y ? 1.f : 0.f;
    case GradFn::Gelu:
      return 0.5f * (1.f + erff(x * 0.70710678118654752f)) +
             x * expf(-0.5f * x * x) / sqrtf(2.f * kPi);
    case GradFn::GeluTanh: {
      const float c = sqrtf(2.f / kPi), u = c * (x + 0.044715f * x * x * x), t = tanhf(u);
      return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * c * (1.f + 3.f * 0.044715f * x * x);
    }
    case GradFn::HardSigmoid:
      return y > 0.f && y < 1.f ? alpha : 0.f;
    case GradFn::HardSwish:
      return x < -3.f ? 0.f : (x > 3.f ? 1.f : x / 3.f + 0.5f);
    case GradFn::Celu:
      return x >= 0.f ? 1.f : expf(x / alpha);
    case GradFn::Softsign:
      return 1.f / ((1.f + fabsf(x)) * (1.f + fabsf(x)));
    case GradFn::ThresholdedRelu:
      return x > alpha ? 1.f : 0.f;
    case GradFn::Shrink:
      return x < -alpha || x > alpha ? 1.f : 0.f;
    case GradFn::Tan:
      return 1.f + y * y;
    case GradFn::Asin:
      return rsqrtf(1.f - x * x);
    case GradFn::Acos:
      return -rsqrtf(1.f - x * x);
    case GradFn::Atan:
      return 1.f / (1.f + x * x);
    case GradFn::Sinh:
      return coshf(x);
    case GradFn::Cosh:
      return sinhf(x);
    case GradFn::Asinh:
      return rsqrtf(x * x + 1.f);
    case GradFn::Acosh:
      return rsqrtf(x * x - 1.f);
    case GradFn::Atanh:
      return 1.f / (1.f - x * x);
  }
  return 0.f;
}

template <class T>
__global__ void eltwise_grad_kernel(GradFn f, T* dx, const T* dy, const T* x, const T* y, int64_t n,
                                    float alpha) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = load(dy, i), xi = load(x, i);
    // Relu, the common case, selects rather than multiplies (0 * inf would be a NaN).
    store(dx, i,
          f == GradFn::Relu ? (xi > 0.f ? g : 0.f) : g * derivative(f, xi, load(y, i), alpha));
  }
}

template <class T>
__global__ void fill_kernel(T* out, int64_t n, float value) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store(out, i, value);
}

__global__ void running_stats_kernel(float* out_mean, float* out_var, const float* mean,
                                     const float* var, const float* batch_mean,
                                     const float* batch_inv_std, int64_t c, float momentum,
                                     float epsilon) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < c;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (out_mean) out_mean[i] = mean[i] * momentum + batch_mean[i] * (1.f - momentum);
    if (out_var) {
      const float inv = batch_inv_std[i];
      const float batch_var = fmaxf(1.f / (inv * inv) - epsilon, 0.f);
      out_var[i] = var[i] * momentum + batch_var * (1.f - momentum);
    }
  }
}

// out[o, index[j], k] += dy[o, j, k]: gathered rows' gradients back where they came from.
template <class T>
__global__ void scatter_add_kernel(T* out, const T* dy, const int64_t* index, int64_t outer,
                                   int64_t axis_size, int64_t count, int64_t inner) {
  const int64_t n = outer * count * inner;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = i % inner, j = (i / inner) % count, o = i / (inner * count);
    atomicAdd(out + (o * axis_size + index[j]) * inner + k, dy[i]);
  }
}

}  // namespace

void launch_scatter_add(Elem t, void* out, const void* dy, const int64_t* index, int64_t outer,
                        int64_t axis_size, int64_t count, int64_t inner, void* stream) {
  const int64_t n = outer * count * inner;
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (t == Elem::F32)
    scatter_add_kernel<<<blocks_for(n), kThreads, 0, s>>>(static_cast<float*>(out),
                                                          static_cast<const float*>(dy), index,
                                                          outer, axis_size, count, inner);
  else
    scatter_add_kernel<<<blocks_for(n), kThreads, 0, s>>>(static_cast<__half*>(out),
                                                          static_cast<const __half*>(dy), index,
                                                          outer, axis_size, count, inner);
}

void launch_running_stats(float* out_mean, float* out_var, const float* mean, const float* var,
                          const float* batch_mean, const float* batch_inv_std, int64_t c,
                          float momentum, float epsilon, void* stream) {
  if (c == 0 || (!out_mean && !out_var)) return;
  running_stats_kernel<<<blocks_for(c), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      out_mean, out_var, mean, var, batch_mean, batch_inv_std, c, momentum, epsilon);
}

void launch_eltwise_grad(GradFn f, Elem t, void* dx, const void* dy, const void* x, const void* y,
                         int64_t n, float alpha, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (t == Elem::F32)
    eltwise_grad_kernel<<<blocks_for(n), kThreads, 0, s>>>(
        f, static_cast<float*>(dx), static_cast<const float*>(dy), static_cast<const float*>(x),
        static_cast<const float*>(y), n, alpha);
  else
    eltwise_grad_kernel<<<blocks_for(n), kThreads, 0, s>>>(
        f, static_cast<__half*>(dx), static_cast<const __half*>(dy), static_cast<const __half*>(x),
        static_cast<const __half*>(y), n, alpha);
}

void launch_fill(Elem t, void* out, int64_t n, float value, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (t == Elem::F32)
    fill_kernel<<<blocks_for(n), kThreads, 0, s>>>(static_cast<float*>(out), n, value);
  else
    fill_kernel<<<blocks_for(n), kThreads, 0, s>>>(static_cast<__half*>(out), n, value);
}

}  // namespace volt::cuda
