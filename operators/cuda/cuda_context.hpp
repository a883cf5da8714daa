// What CUDA kernels share: the library handles of the calling thread for a device, bound to the
// run's stream on each use.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "operators/cuda/cuda_check.hpp"
#include "operators/kernel.hpp"

namespace volt::cuda {

struct Handles {
  cublasHandle_t blas = nullptr;
  cudnnHandle_t dnn = nullptr;
  cusparseHandle_t sparse = nullptr;
};

// This thread's handles for `device`, created on first use (kept for the thread's life).
Handles& handles(int device);

inline cudaStream_t stream_of(const RunContext& ctx) {
  return static_cast<cudaStream_t>(ctx.stream());
}

// cuBLAS bound to the run's stream.
inline cublasHandle_t blas(const RunContext& ctx, const Tensor& on) {
  cublasHandle_t h = handles(on.device().index).blas;
  VOLT_CUDA_CALL(cublasSetStream(h, stream_of(ctx)));
  return h;
}
inline cudnnHandle_t dnn(const RunContext& ctx, const Tensor& on) {
  cudnnHandle_t h = handles(on.device().index).dnn;
  VOLT_CUDA_CALL(cudnnSetStream(h, stream_of(ctx)));
  return h;
}

inline cusparseHandle_t sparse(const RunContext& ctx, const Tensor& on) {
  cusparseHandle_t h = handles(on.device().index).sparse;
  VOLT_CUDA_CALL(cusparseSetStream(h, stream_of(ctx)));
  return h;
}

// Launch errors surface at the next call; this makes them surface here, naming the kernel.
inline void check_launch(const char* kernel) {
  check(cudaGetLastError(), kernel);
}

}  // namespace volt::cuda
