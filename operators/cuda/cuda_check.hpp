// Status checks for the CUDA libraries: every failure becomes volt::Error with ErrorCode::Device
// (OutOfMemory for allocation failures), naming the call.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <cusparse.h>

#include <string>

#include "runtime/error.hpp"

namespace volt::cuda {

inline void check(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();  // clear the sticky-free error so the next call starts clean
  fail(e == cudaErrorMemoryAllocation ? ErrorCode::OutOfMemory : ErrorCode::Device,
       std::string(call) + ": " + cudaGetErrorString(e));
}
inline void check(cublasStatus_t s, const char* call) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  fail(s == CUBLAS_STATUS_ALLOC_FAILED ? ErrorCode::OutOfMemory : ErrorCode::Device,
       std::string(call) + ": " + cublasGetStatusString(s));
}
inline void check(cusparseStatus_t s, const char* call) {
  if (s == CUSPARSE_STATUS_SUCCESS) return;
  fail(s == CUSPARSE_STATUS_ALLOC_FAILED ? ErrorCode::OutOfMemory : ErrorCode::Device,
       std::string(call) + ": " + cusparseGetErrorString(s));
}
inline void check(cudnnStatus_t s, const char* call) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  fail(ErrorCode::Device, std::string(call) + ": " + cudnnGetErrorString(s));
}

}  // namespace volt::cuda

#define VOLT_CUDA_CALL(expr) ::volt::cuda::check((expr), #expr)
