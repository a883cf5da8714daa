// The fused epilogue of a linear op (MatMul after fuse_matmul_epilogue) on the paths that do not
// run it as oneDNN post-ops: y = act(y + bias) + residual, bias broadcast over the last axis and
// the residual broadcast to y. Inputs of these kernels: 2 = bias ("" when none), 3 = residual.
#pragma once
#include "operators/common/fused_activation.hpp"
#include "operators/kernel.hpp"

namespace volt {

// Checks the bias ([N], y's last axis; unless `bias` is false, where input 2 means something
// else, as Gemm's C) and the residual (broadcasts to y) of a fused linear op.
void check_epilogue(InferContext& ctx, const Shape& y, bool bias = true);

// y += r, r broadcast to y (floating-point types).
void add_broadcast(Tensor& y, const Tensor& r, const Node& node);

// y = act(y + bias) + residual; `bias` and `residual` may be null.
void apply_epilogue(Tensor& y, const Tensor* bias, const FusedActivation& act,
                    const Tensor* residual, const Node& node);

}  // namespace volt
