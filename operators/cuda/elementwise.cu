// Elementwise, softmax, layer-norm and permute kernels. One thread per element (grid-stride),
// fp32 arithmetic for fp16 storage.
#include <cuda_fp16.h>

#include <cmath>

#include "operators/cuda/device_kernels.hpp"
#include "operators/cuda/device_math.cuh"

namespace volt::cuda {
namespace {

__device__ inline float binary(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::Add:
      return a + b;
    case BinaryOp::Sub:
      return a - b;
    case BinaryOp::Mul:
      return a * b;
    case BinaryOp::Div:
      return a / b;
    case BinaryOp::Pow:
      return powf(a, b);
    case BinaryOp::Max:
      return fmaxf(a, b);
    case BinaryOp::Min:
      return fminf(a, b);
    case BinaryOp::AssignB:
      return b;
  }
  return 0.f;
}

template <class T>
__global__ void binary_kernel(BinaryOp op, T* out, const T* a, const T* b, int64_t n, Broadcast s) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rest = i, ia = 0, ib = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
      const int64_t c = rest % s.dims[d];
      rest /= s.dims[d];
      ia += c * s.a_strides[d];
      ib += c * s.b_strides[d];
    }
    store(out, i, binary(op, load(a, ia), load(b, ib)));
  }
}

template <class T>
__global__ void where_kernel(T* out, const bool* c, const T* a, const T* b, int64_t n,
                             Broadcast s) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rest = i, ia = 0, ib = 0, ic = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
      const int64_t k = rest % s.dims[d];
      rest /= s.dims[d];
      ia += k * s.a_strides[d];
      ib += k * s.b_strides[d];
      ic += k * s.c_strides[d];
    }
    out[i] = c[ic] ? a[ia] : b[ib];
  }
}

__device__ inline float unary(UnaryOp op, float x, float alpha, float beta) {
  switch (op) {
    case UnaryOp::Relu:
      return x > 0.f ? x : 0.f;
    case UnaryOp::LeakyRelu:
      return x >= 0.f ? x : alpha * x;
    case UnaryOp::Sigmoid:
      return 1.f / (1.f + expf(-x));
    case UnaryOp::Tanh:
      return tanhf(x);
    case UnaryOp::Exp:
      return expf(x);
    case UnaryOp::Log:
      return logf(x);
    case UnaryOp::Sqrt:
      return sqrtf(x);
    case UnaryOp::Neg:
      return -x;
    case UnaryOp::Abs:
      return fabsf(x);
    case UnaryOp::Erf:
      return erff(x);
    case UnaryOp::Gelu:
      return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
    case UnaryOp::GeluTanh:
      return 0.5f * x * (1.f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    case UnaryOp::Clip:
      return fminf(fmaxf(x, alpha), beta);
    case UnaryOp::HardSigmoid:
      return fminf(fmaxf(alpha * x + beta, 0.f), 1.f);
    case UnaryOp::Softplus:
      return x > 20.f ? x : log1pf(expf(x));
    case UnaryOp::Identity:
      return x;
    case UnaryOp::Scale:
      return alpha * x;
  }
  return 0.f;
}

template <class T>
__global__ void unary_kernel(UnaryOp op, T* out, const T* x, int64_t n, float alpha, float beta) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store(out, i, unary(op, load(x, i), alpha, beta));
}

template <class To, class From>
__global__ void cast_kernel(To* out, const From* x, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store(out, i, load(x, i));
}

// One block per row.
template <class T>
__global__ void softmax_kernel(T* out, const T* x, int64_t cols, bool log) {
  extern __shared__ float shared[];
  const T* row = x + blockIdx.x * cols;
  T* dst = out + blockIdx.x * cols;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, load(row, c));
  m = block_reduce(m, true, shared);
  float sum = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += expf(load(row, c) - m);
  sum = block_reduce(sum, false, shared);
  const float log_sum = logf(sum);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = load(row, c) - m;
    store(dst, c, log ? v - log_sum : expf(v) / sum);
  }
}

// Attention's scores in place: p = softmax(s + mask) per row of [rows, cols]; the mask (may be
// null) is read through `mask_rows` (its offset for each row's index over the scores' leading
// axes) and `mask_col_stride` (0 or 1).
template <class T>
__global__ void attention_softmax_kernel(T* scores, const T* mask, int64_t cols,
                                         Broadcast mask_rows, int64_t mask_col_stride) {
  extern __shared__ float shared[];
  T* row = scores + blockIdx.x * cols;
  const T* mrow = nullptr;
  if (mask) {
    int64_t rest = blockIdx.x, off = 0;
    for (int d = mask_rows.rank - 1; d >= 0; --d) {
      off += (rest % mask_rows.dims[d]) * mask_rows.a_strides[d];
      rest /= mask_rows.dims[d];
    }
    mrow = mask + off;
  }
  auto at = [&](int64_t c) {
    return load(row, c) + (mrow ? load(mrow, c * mask_col_stride) : 0.f);
  };
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, at(c));
  m = block_reduce(m, true, shared);
  float sum = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += expf(at(c) - m);
  sum = block_reduce(sum, false, shared);
  // Every thread has read its values before any writes: each writes only the columns it read.
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) store(row, c, expf(at(c) - m) / sum);
}

template <class T, class P>
__global__ void layer_norm_kernel(T* out, const T* x, const P* scale, const P* bias, int64_t cols,
                                  float epsilon) {
  extern __shared__ float shared[];
  const T* row = x + blockIdx.x * cols;
  T* dst = out + blockIdx.x * cols;
  float sum = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += load(row, c);
  const float mean = block_reduce(sum, false, shared) / static_cast<float>(cols);
  float sq = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float d = load(row, c) - mean;
    sq += d * d;
  }
  const float rstd = rsqrtf(block_reduce(sq, false, shared) / static_cast<float>(cols) + epsilon);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = (load(row, c) - mean) * rstd * load(scale, c) + (bias ? load(bias, c) : 0.f);
    store(dst, c, v);
  }
}

template <class T>
__global__ void permute_kernel(T* out, const T* x, int64_t n, int rank, Broadcast s) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rest = i, src = 0;
    for (int d = rank - 1; d >= 0; --d) {
      src += (rest % s.dims[d]) * s.a_strides[d];
      rest /= s.dims[d];
    }
    out[i] = x[src];
  }
}

template <class T>
__global__ void gather_kernel(T* out, const T* data, const int64_t* index, int64_t outer,
                              int64_t axis_size, int64_t count, int64_t inner) {
  const int64_t n = outer * count * inner;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = i % inner, j = (i / inner) % count, o = i / (inner * count);
    out[i] = data[(o * axis_size + index[j]) * inner + k];
  }
}

}  // namespace

void launch_binary(BinaryOp op, Elem t, void* out, const void* a, const void* b, int64_t n,
                   const Broadcast& shape, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (t == Elem::F32)
    binary_kernel<<<blocks_for(n), kThreads, 0, s>>>(op, static_cast<float*>(out),
                                                     static_cast<const float*>(a),
                                                     static_cast<const float*>(b), n, shape);
  else
    binary_kernel<<<blocks_for(n), kThreads, 0, s>>>(op, static_cast<__half*>(out),
                                                     static_cast<const __half*>(a),
                                                     static_cast<const __half*>(b), n, shape);
}

void launch_where(Elem t, void* out, const bool* cond, const void* a, const void* b, int64_t n,
                  const Broadcast& shape, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (t == Elem::F32)
    where_kernel<<<blocks_for(n), kThreads, 0, s>>>(static_cast<float*>(out), cond,
                                                    static_cast<const float*>(a),
                                                    static_cast<const float*>(b), n, shape);
  else
    where_kernel<<<blocks_for(n), kThreads, 0, s>>>(static_cast<__half*>(out), cond,
                                                    static_cast<const __half*>(a),
                                                    static_cast<const __half*>(b), n, shape);
}

void launch_unary(UnaryOp op, Elem t, void* out, const void* x, int64_t n, float alpha, float beta,
                  void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (t == Elem::F32)
    unary_kernel<<<blocks_for(n), kThreads, 0, s>>>(op, static_cast<float*>(out),
                                                    static_cast<const float*>(x), n, alpha, beta);
  else
    unary_kernel<<<blocks_for(n), kThreads, 0, s>>>(op, static_cast<__half*>(out),
                                                    static_cast<const __half*>(x), n, alpha, beta);
}

void launch_cast(Elem to, void* out, Elem from, const void* x, int64_t n, void* stream) {
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  if (to == Elem::F16 && from == Elem::F32)
    cast_kernel<<<blocks_for(n), kThreads, 0, s>>>(static_cast<__half*>(out),
                                                   static_cast<const float*>(x), n);
  else if (to == Elem::F32 && from == Elem::F16)
    cast_kernel<<<blocks_for(n), kThreads, 0, s>>>(static_cast<float*>(out),
                                                   static_cast<const __half*>(x), n);
  else
    cudaMemcpyAsync(out, x, static_cast<size_t>(n) * (to == Elem::F32 ? 4 : 2),
                    cudaMemcpyDeviceToDevice, s);
}

void launch_softmax(Elem t, void* out, const void* x, int64_t rows, int64_t cols, bool log,
                    void* stream) {
  if (rows == 0 || cols == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  const int threads = row_threads(cols);
  const size_t shared = threads * sizeof(float);
  if (t == Elem::F32)
    softmax_kernel<<<static_cast<unsigned>(rows), threads, shared, s>>>(
        static_cast<float*>(out), static_cast<const float*>(x), cols, log);
  else
    softmax_kernel<<<static_cast<unsigned>(rows), threads, shared, s>>>(
        static_cast<__half*>(out), static_cast<const __half*>(x), cols, log);
}

void launch_attention_softmax(Elem t, void* scores, const void* mask, int64_t rows, int64_t cols,
                              const Broadcast& mask_rows, int64_t mask_col_stride, void* stream) {
  if (rows == 0 || cols == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  const int threads = row_threads(cols);
  const size_t shared = threads * sizeof(float);
  if (t == Elem::F32)
    attention_softmax_kernel<<<static_cast<unsigned>(rows), threads, shared, s>>>(
        static_cast<float*>(scores), static_cast<const float*>(mask), cols, mask_rows,
        mask_col_stride);
  else
    attention_softmax_kernel<<<static_cast<unsigned>(rows), threads, shared, s>>>(
        static_cast<__half*>(scores), static_cast<const __half*>(mask), cols, mask_rows,
        mask_col_stride);
}

void launch_layer_norm(Elem t, void* out, const void* x, const void* scale, const void* bias,
                       int64_t rows, int64_t cols, float epsilon, void* stream) {
  if (rows == 0 || cols == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  const int threads = row_threads(cols);
  const size_t shared = threads * sizeof(float);
  if (t == Elem::F32)
    layer_norm_kernel<<<static_cast<unsigned>(rows), threads, shared, s>>>(
        static_cast<float*>(out), static_cast<const float*>(x), static_cast<const float*>(scale),
        static_cast<const float*>(bias), cols, epsilon);
  else
    layer_norm_kernel<<<static_cast<unsigned>(rows), threads, shared, s>>>(
        static_cast<__half*>(out), static_cast<const __half*>(x), static_cast<const __half*>(scale),
        static_cast<const __half*>(bias), cols, epsilon);
}

void launch_permute(int element_bytes, void* out, const void* x, int64_t n, int rank,
                    const int64_t* out_dims, const int64_t* in_strides, void* stream) {
  if (n == 0) return;
  Broadcast s;
  s.rank = rank;
  for (int d = 0; d < rank; ++d) {
    s.dims[d] = out_dims[d];
    s.a_strides[d] = in_strides[d];
  }
  auto st = static_cast<cudaStream_t>(stream);
  switch (element_bytes) {
    case 1:
      permute_kernel<<<blocks_for(n), kThreads, 0, st>>>(
          static_cast<uint8_t*>(out), static_cast<const uint8_t*>(x), n, rank, s);
      break;
    case 2:
      permute_kernel<<<blocks_for(n), kThreads, 0, st>>>(
          static_cast<uint16_t*>(out), static_cast<const uint16_t*>(x), n, rank, s);
      break;
    case 4:
      permute_kernel<<<blocks_for(n), kThreads, 0, st>>>(
          static_cast<uint32_t*>(out), static_cast<const uint32_t*>(x), n, rank, s);
      break;
    default:
      permute_kernel<<<blocks_for(n), kThreads, 0, st>>>(
          static_cast<uint64_t*>(out), static_cast<const uint64_t*>(x), n, rank, s);
      break;
  }
}

void launch_gather(int element_bytes, void* out, const void* data, const int64_t* index,
                   int64_t outer, int64_t axis_size, int64_t count, int64_t inner, void* stream) {
  const int64_t n = outer * count * inner;
  if (n == 0) return;
  auto s = static_cast<cudaStream_t>(stream);
  switch (element_bytes) {
    case 1:
      gather_kernel<<<blocks_for(n), kThreads, 0, s>>>(static_cast<uint8_t*>(out),
                                                       static_cast<const uint8_t*>(data), index,
                                                       outer, axis_size, count, inner);
      break;
    case 2:
      gather_kernel<<<blocks_for(n), kThreads, 0, s>>>(static_cast<uint16_t*>(out),
                                                       static_cast<const uint16_t*>(data), index,
                                                       outer, axis_size, count, inner);
      break;
    case 4:
      gather_kernel<<<blocks_for(n), kThreads, 0, s>>>(static_cast<uint32_t*>(out),
                                                       static_cast<const uint32_t*>(data), index,
                                                       outer, axis_size, count, inner);
      break;
    default:
      gather_kernel<<<blocks_for(n), kThreads, 0, s>>>(static_cast<uint64_t*>(out),
                                                       static_cast<const uint64_t*>(data), index,
                                                       outer, axis_size, count, inner);
      break;
  }
}

}  // namespace volt::cuda
