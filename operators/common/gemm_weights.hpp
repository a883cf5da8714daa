// The layout in which oneDNN's gemm reads constant weights fastest, for every product volt makes
// on them (MatMul and Gemm, the per-tap products of a convolution whose taps mostly read
// padding).
#pragma once
#include <dnnl.hpp>

#include <cstdint>

namespace volt {

// Weights `b` [..., K, N] of `weights_dt` for a product of `rows` rows of A: format any (the
// primitive's choice), or a strided layout oneDNN's AVX2 gemm reads faster (see the .cpp).
dnnl::memory::desc packed_weights_md(const dnnl::memory::desc& b,
                                     dnnl::memory::data_type weights_dt, int64_t rows);

}  // namespace volt
