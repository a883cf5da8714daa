// A 2-D convolution in a plan for several input shapes as one product on volt's packed kernel
// (packed_product.hpp): each output pixel's window gathered into a row of KH·KW·C inputs, taps
// outermost (zeros where a tap reads padding), times the weights read as a [KH·KW·C, M] matrix
// and packed once per session, with the bias and the activation applied in the product; the rows
// are Y channels-last, written into Y's stored layout where it has another.
//
// Why: oneDNN generates a convolution's code for its exact shape, and buckets of widths
// (width_buckets.hpp) still generate it at every new bucket: a text-line recognizer's
// height-collapsing 2x1 convolution (192 -> 192 channels, blocks of 16) took 73-155 us of code
// generation at each new width. The product needs none; gathering the window costs a copy of
// KH·KW times X, small beside the K·M multiply-adds of each row. Small weights only (the packed
// product's limit), f32, group 1, no residual, on CPUs with AVX-512 (packed_product_suits).
#pragma once
#include <cstdint>
#include <memory>

#include "operators/common/layout.hpp"
#include "operators/cpu/conv_reference.hpp"
#include "operators/cpu/packed_product.hpp"

namespace volt {

struct ConvAsProduct : ConvWindow2d {
  using ConvWindow2d::ConvWindow2d;
  std::shared_ptr<const PackedProduct> product;
  StoredLayout x_layout = StoredLayout::ChannelsFirst, y_layout = StoredLayout::ChannelsFirst;
  // Output pixels per pass: the gathered rows at the scratch's start, then (Y not channels-last)
  // the product's rows at y_at.
  int64_t rows_per_pass = 0;
  size_t y_at = 0;
  bool x_is_rows = false;  // X's pixels are the rows as they are (nothing gathered)
};

// The product for convolution `s` with constant weights `w` (input 1), X and Y stored as
// `x_layout` and `y_layout`; null where it does not suit (see above). Asks for its scratch.
std::shared_ptr<const ConvAsProduct> plan_conv_as_product(InferContext& ctx, const ConvShapes& s,
                                                          const Tensor& w, bool has_bias,
                                                          const FusedActivation& act,
                                                          StoredLayout x_layout,
                                                          StoredLayout y_layout);

void run_conv_as_product(const ConvAsProduct& p, const float* x, const float* bias, float* y,
                         void* scratch, int threads);

}  // namespace volt
