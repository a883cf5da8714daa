// What the CUDA Kernel classes share: element-type mapping and registration helpers.
#pragma once
#include "operators/common/shape_util.hpp"
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

// A reduction of `x` over the axes flagged in `reduced` as launch_reduce takes it: the kept axes in
// order (the output's layout), the reduced ones; `n_reduced` gets how many elements each output
// sums.
inline ReduceGeometry reduce_geometry(const Shape& x, const std::vector<char>& reduced,
                                      int64_t& n_reduced) {
  ReduceGeometry g;
  const auto strides = strides_of(x);
  n_reduced = 1;
  for (size_t d = 0; d < x.size(); ++d) {
    if (reduced[d]) {
      g.reduced_dims[g.reduced_rank] = x[d];
      g.reduced_strides[g.reduced_rank++] = strides[d];
      n_reduced *= x[d];
    } else {
      g.kept_dims[g.kept_rank] = x[d];
      g.kept_strides[g.kept_rank++] = strides[d];
    }
  }
  return g;
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
