// A pointwise convolution (every kernel axis 1, stride 1, no padding, one group) over
// channels-first X and Y as the product it is: per image, Y[n] [M, L] = W [M, C] X[n] [C, L]
// (L the spatial size), one oneDNN matmul over the batch with W broadcast, the bias a binary
// post-op along M (oneDNN 2.6's matmul bias of shape [1, M, 1] runs its reference loop), then a
// fused residual (sum) and activation. oneDNN's convolution takes channels-first tensors through
// reorders into and out of blocks of 16 channels around its kernel; for a pointwise layer they
// cost a large share of the arithmetic (PointNet's 128 -> 1024 over 1024 points, batch 8: the
// output's reorder back 2.0-2.8 ms beside the convolution's 11).
//
// Measured on a Zen 4, 2 threads, in a oneDNN-only benchmark of the two routes (reorders and
// blocked convolution, against the matmul; [N, C, L] -> M, median of 15 runs each):
// 8x128x1024 -> 1024 16.0 -> 13.2 ms, 1x128x1024 -> 1024 1.65 -> 1.47, 8x64x1024 -> 128 0.99 ->
// 0.84; medians of 7 alternating pairs: 1x256x500 -> 512 0.74 -> 0.63. At an L neither a multiple
// of 16 (oneDNN's block along L) nor long, the matmul's tails cost what the reorders do
// (32x64x100 -> 64: 0.17 either way), so those keep the convolution. PointNet at batch 8 (`volt
// bench`, alternating with this route disabled): 15.2-17.5 -> 14.3-15.9 ms.
#pragma once
#include <memory>

#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/fused_activation.hpp"
#include "operators/cpu/conv_reference.hpp"
#include "operators/kernel.hpp"

namespace volt {

struct PointwiseMatmul {
  dnnl::matmul prim;
  dnnl::memory::desc w, x, y, bias, scratch;
  bool has_bias = false;
  bool own_activation = false;  // volt's pass over Y after the primitive (own_activation.hpp)
};

// The product for convolution `s` (X and Y channels-first, f32, constant or computed weights),
// or null where it does not apply (see above). `residual`: a sum post-op adds what Y holds.
std::shared_ptr<const PointwiseMatmul> plan_pointwise_matmul(InferContext& ctx, const ConvShapes& s,
                                                             const FusedActivation& act,
                                                             bool residual);

// Y (holding the residual when there is one) from W, X and the bias (M floats, or null).
void run_pointwise_matmul(const PointwiseMatmul& p, const FusedActivation& act, const float* w,
                          const float* x, const float* bias, float* y, void* scratch);

}  // namespace volt
