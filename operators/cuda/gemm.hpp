// Row-major matrix products on cuBLAS, shared by MatMul, Gemm and the backward kernels. fp16
// runs on tensor cores with fp32 accumulation (CUBLAS_COMPUTE_32F); fp32 stays full fp32.
#pragma once
#include <cublas_v2.h>

#include "operators/kernel.hpp"

namespace volt::cuda {

cudaDataType_t cuda_type(DType t);

// C[m,n] = alpha * op(A)[m,k] op(B)[k,n] + beta * C, row-major, `batch` times with the given
// element strides between matrices (0: the same matrix for every batch entry).
void gemm(cublasHandle_t h, DType t, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          float alpha, const void* a, int64_t stride_a, const void* b, int64_t stride_b, float beta,
          void* c, int64_t stride_c, int64_t batch);

// Y[M, N] = C broadcast (Gemm's C before beta scales it in the product).
void assign_broadcast(const RunContext& ctx, Tensor& y, const Tensor& c);

}  // namespace volt::cuda
