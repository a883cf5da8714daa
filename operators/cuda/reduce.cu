// Reductions over any set of axes: one warp per output element, each lane striding over the
// reduced elements, then a shuffle tree. fp32 accumulation for fp32 and fp16 storage.
#include <math_constants.h>

#include "operators/cuda/device_kernels.hpp"
#include "operators/cuda/device_math.cuh"

namespace volt::cuda {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ inline float start_value(ReduceOp op) {
  switch (op) {
    case ReduceOp::Max:
      return -CUDART_INF_F;
    case ReduceOp::Min:
      return CUDART_INF_F;
    case ReduceOp::Prod:
      return 1.f;
    default:
      return 0.f;
  }
}

// Folds one element in (LogSumExp: `shift` is the maximum, found first).
__device__ inline float fold(ReduceOp op, float acc, float v, float shift) {
  switch (op) {
    case ReduceOp::Max:
      return fmaxf(acc, v);
    case ReduceOp::Min:
      return fminf(acc, v);
    case ReduceOp::Prod:
      return acc * v;
    case ReduceOp::SumSquare:
    case ReduceOp::L2:
      return acc + v * v;
    case ReduceOp::L1:
      return acc + fabsf(v);
    case ReduceOp::LogSumExp:
      return acc + expf(v - shift);
    default:
      return acc + v;
  }
}

// Combines two lanes' partial results.
__device__ inline float combine(ReduceOp op, float a, float b) {
  switch (op) {
    case ReduceOp::Max:
      return fmaxf(a, b);
    case ReduceOp::Min:
      return fminf(a, b);
    case ReduceOp::Prod:
      return a * b;
    default:
      return a + b;
  }
}

__device__ inline float warp_all(ReduceOp op, float v) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = combine(op, v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

__device__ inline float finish(ReduceOp op, float acc, int64_t n, float shift) {
  switch (op) {
    case ReduceOp::Mean:
      return n > 0 ? acc / static_cast<float>(n) : 0.f;
    case ReduceOp::L2:
      return sqrtf(acc);
    case ReduceOp::LogSum:
      return logf(acc);
    case ReduceOp::LogSumExp:
      return n > 0 ? shift + logf(acc) : -CUDART_INF_F;
    default:
      return acc;
  }
}

__device__ inline int64_t reduced_offset(const ReduceGeometry& g, int64_t r) {
  int64_t off = 0;
  for (int d = g.reduced_rank - 1; d >= 0; --d) {
    off += (r % g.reduced_dims[d]) * g.reduced_strides[d];
    r /= g.reduced_dims[d];
  }
  return off;
}

template <class T>
__global__ void reduce_kernel(ReduceOp op, T* out, const T* x, int64_t n_out, int64_t n_reduced,
                              ReduceGeometry g) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  // The loop bound is the same for every lane of a warp, so the shuffles see all 32.
  for (int64_t o = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32; o < n_out;
       o += warps) {
    int64_t rest = o, base = 0;
    for (int d = g.kept_rank - 1; d >= 0; --d) {
      base += (rest % g.kept_dims[d]) * g.kept_strides[d];
      rest /= g.kept_dims[d];
    }
    float shift = 0.f;
    if (op == ReduceOp::LogSumExp) {
      float m = -CUDART_INF_F;
      for (int64_t r = lane; r < n_reduced; r += 32)
        m = fmaxf(m, load(x, base + reduced_offset(g, r)));
      shift = warp_all(ReduceOp::Max, m);
      if (isinf(shift)) shift = 0.f;  // all -inf (or empty): exp(x - 0) keeps the sum right
    }
    float acc = start_value(op);
    for (int64_t r = lane; r < n_reduced; r += 32)
      acc = fold(op, acc, load(x, base + reduced_offset(g, r)), shift);
    acc = warp_all(op, acc);
    if (lane == 0) store(out, o, finish(op, acc, n_reduced, shift));
  }
}

}  // namespace

void launch_reduce(ReduceOp op, Elem t, void* out, const void* x, int64_t n_out, int64_t n_reduced,
                   const ReduceGeometry& g, void* stream) {
  if (n_out == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  const int blocks = blocks_for(n_out * 32);
  if (t == Elem::F32)
    reduce_kernel<<<blocks, kThreads, 0, s>>>(op, static_cast<float*>(out),
                                              static_cast<const float*>(x), n_out, n_reduced, g);
  else
    reduce_kernel<<<blocks, kThreads, 0, s>>>(op, static_cast<__half*>(out),
                                              static_cast<const __half*>(x), n_out, n_reduced, g);
}

}  // namespace volt::cuda
