// A 2-D convolution whose taps mostly read padding (DeepLab's ASPP: a 3x3 dilated by 12 over a
// 14x14 map, each output reading the map with 1.65 of its 9 taps on average) as one product per
// tap, over the outputs where that tap reads the map: Y[n, oy, ox, :] += X[n, iy, ix, :] x W_tap
// for the rectangle of outputs whose input pixel (iy, ix) lies inside, X and Y channels-last (X
// and Y stored otherwise are reordered into and out of the scratch).
// oneDNN's convolution computes every tap of every output (its dilated kernels on AVX2: gemm over
// an im2col buffer), five times the work in that case.
#pragma once
#include <dnnl.hpp>

#include <memory>
#include <vector>

#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/fused_activation.hpp"
#include "operators/cpu/conv_reference.hpp"
#include "operators/kernel.hpp"

namespace volt {

struct LiveTapProducts {
  struct Product {
    dnnl::matmul prim;
    dnnl::memory::desc a, b, y, bias, scratch;
    Tensor packed_b;
    size_t x_at = 0, y_at = 0;      // floats into X and Y of the rectangle's first pixel
    int64_t matrices = 1;           // per image: one per output row, or one for all
    size_t x_step = 0, y_step = 0;  // floats from one matrix to the next
  };
  dnnl_adapter::Staged x, y;  // as stored <-> channels-last
  // The partial taps (accumulating into Y, zeroed first), then the one every output reads,
  // which adds the bias and applies the activation.
  std::vector<Product> products;
  size_t y_floats = 0;
  int64_t images = 0;
  size_t x_image = 0, y_image = 0;  // floats per image
};

// The products for a 2-D f32 convolution of shapes `s`, group 1, with constant weights `w`
// (input 1), X and Y stored as `stored_x` and `stored_y`; null where it does not suit: some tap
// live on every output (the last product), and at most half the taps' work of the direct
// convolution left.
std::shared_ptr<LiveTapProducts> plan_live_tap_products(InferContext& ctx, const ConvShapes& s,
                                                        const Tensor& w, bool has_bias,
                                                        const FusedActivation& act,
                                                        const dnnl::memory::desc& stored_x,
                                                        const dnnl::memory::desc& stored_y);

void run_live_tap_products(const LiveTapProducts& p, const float* stored_x, const float* bias,
                           float* stored_y, void* scratch);

}  // namespace volt
