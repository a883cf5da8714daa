// Products with constant weights (MatMul and Gemm over 2-D weights: linear layers, attention's
// projections) in plans built for one of several input shapes, on CPUs with AVX-512: volt's
// register-blocked kernel over weights packed once per session in blocks of 32 columns, any
// number of rows, with the bias, the activation and a residual of Y's shape applied to each
// block while it is in registers' reach.
//
// Why: oneDNN 2.6 serves a matmul whose rows are left to run time (one primitive for every
// shape: no code made per shape) with its gemm, which packs the weights at every call and adds
// bias and post-ops in a pass of their own; its fixed-shape brgemm kernels need code made per
// shape. A text classifier's four projections at 114 rows took 12.9 / 32.3 / 43.3 / 51.2 us
// that way against brgemm's 8.8 / 26.0 / 32.2 / 35.5 (ONEDNN_VERBOSE, Zen 5, 2 threads): a
// stream of sentences of random lengths runs on such plans only. Small products only (below).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "operators/common/fused_activation.hpp"
#include "operators/kernel.hpp"

namespace volt {

struct PackedProduct {
  std::shared_ptr<const Tensor> weights;  // [N' / 32][K][32], columns past N zero
  int64_t k = 0, n = 0;
  FusedActivation act;
  bool has_bias = false;  // N floats added before the activation
  bool residual = false;  // a tensor of Y's shape added after it
};

// Whether this plan of a node may take the packed product: a plan for several shapes on a CPU
// whose oneDNN dispatches AVX-512, weights of at most kPackedProductMaxWeights floats, an
// activation the kernel applies in lanes.
bool packed_product_suits(const InferContext& ctx, int64_t k, int64_t n,
                          const FusedActivation& act);

// Past a MiB of weights the gemm's packing at each call is a small part of the product, and its
// blocking over A wins back what it costs: against oneDNN's gemm with run-time rows, bias and
// ReLU (a /tmp benchmark, 2 threads, Zen 5, rows 1 to 512) the kernel took 0.29-0.86 of its time
// on 128 x 512, 512 x 128 and 256 x 1024 weights (0.94-1.00 at 128-512 rows of 512 x 128),
// 0.78-1.01 on 768 x 768 and 0.96-1.04 on 3072 x 768. (The packed copy is one more copy of the
// weights: a MiB at most, each.)
constexpr int64_t kPackedProductMaxWeights = int64_t{1} << 18;

// The product for weights `w` read as (k, n) at k `k_stride` + n `n_stride` (a Gemm's transB is
// strides), packed once per session through the node's memo. With `k_block` (0: all of K), the
// rows come in blocks of k_block, block b's row r at r `k_stride` + b `block_stride`: a
// convolution's weights [M, C, KH, KW] read with the taps outermost (conv_as_product.hpp).
std::shared_ptr<const PackedProduct> plan_packed_product(InferContext& ctx, const Tensor& w,
                                                         int64_t k, int64_t n, int64_t k_stride,
                                                         int64_t n_stride, bool has_bias,
                                                         const FusedActivation& act, bool residual,
                                                         int64_t k_block = 0,
                                                         int64_t block_stride = 0);

// Y [rows, N] = act(A [rows, K] W + bias) + residual, A, Y and the residual rows of K and N
// floats.
void run_packed_product(const PackedProduct& p, const float* a, int64_t rows, const float* bias,
                        const float* residual, float* y, int threads);

// A product of two computed operands in a plan for several shapes (attention's scores Q K^T and
// their weighting of V) on the same kernel: for each batch, B packed into the scratch at each run
// from its strides (times `scale`: volt.product_scale), A's rows and Y's rows read and written
// where they lie. oneDNN's gemm with run-time dimensions, which served these, packs B at every
// call too (into buffers it allocates), and must be given a transposed B as plain rows first.
struct ComputedProduct {
  int64_t m = 0, k = 0, n = 0;
  float scale = 1.0f;
  int64_t lda = 0, ldy = 0;  // the row strides of A and Y (along K and N their elements adjacent)
  int64_t b_k = 0, b_n = 0;  // B's strides along K and N
  Shape batch;               // the result's batch axes
  // Each operand's stride along each batch axis (0 where it is broadcast).
  std::vector<int64_t> a_batch, b_batch, y_batch;
};

// Whether this plan of a node may take it: a plan for several shapes, a CPU whose oneDNN
// dispatches AVX-512.
bool computed_product_suits(const InferContext& ctx);
// The scratch a run needs: every batch's B packed.
size_t computed_product_scratch(const ComputedProduct& p);
void run_computed_product(const ComputedProduct& p, const float* a, const float* b, float* y,
                          void* scratch, int threads);

// The pieces of those products, for kernels that chain them (ai.volt Attention): B [k, n], read
// at k `k_stride` + n `n_stride` and times `scale`, packed as the kernel reads it into
// packed_floats(k, n) floats at `to`; and Y [rows, n] (rows `ldy` apart) = A [rows, k] (rows
// `lda` apart) times such a B, on the calling thread. AVX-512 only (computed_product_suits).
int64_t packed_floats(int64_t k, int64_t n);
void pack_operand(const float* b, int64_t k, int64_t n, int64_t k_stride, int64_t n_stride,
                  float scale, float* to);
void product_with_packed(const float* a, int64_t lda, int64_t rows, const float* packed, int64_t k,
                         int64_t n, float* y, int64_t ldy);

}  // namespace volt
