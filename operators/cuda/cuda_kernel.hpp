// What the CUDA Kernel classes share: element-type mapping and registration helpers.
#pragma once
#include "operators/cuda/cuda_context.hpp"
#include "operators/cuda/device_kernels.hpp"
#include "operators/registry.hpp"

namespace volt::cuda {

// The dtypes the CUDA kernels compute in: fp32, and fp16 on tensor cores where it matters.
inline const std::vector<DType> kCudaFloatTypes = {DType::Float, DType::Float16};

inline Elem elem_of(DType t, const RunContext& ctx) {
  if (t == DType::Float) return Elem::F32;
  if (t == DType::Float16) return Elem::F16;
  ctx.error(std::string("has no CUDA kernel for ") + dtype_name(t));
}

// A CUDA kernel of the default domain.
inline KernelDef cuda_kernel(const char* op, int since,
                             std::function<std::unique_ptr<Kernel>(const Node&)> create,
                             std::vector<int> host_inputs = {}) {
  return {.op = op,
          .since = since,
          .device = "cuda",
          .types = kCudaFloatTypes,
          .host_inputs = std::move(host_inputs),
          .create = std::move(create)};
}

// A CUDA kernel of volt's own domain (the backward kernels the gradient rules emit).
inline KernelDef cuda_volt_kernel(const char* op,
                                  std::function<std::unique_ptr<Kernel>(const Node&)> create,
                                  std::vector<int> host_inputs = {}) {
  KernelDef def = cuda_kernel(op, 1, std::move(create), std::move(host_inputs));
  def.domain = kVoltDomain;
  return def;
}

}  // namespace volt::cuda
