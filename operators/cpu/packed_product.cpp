#include "operators/cpu/packed_product.hpp"

#include <immintrin.h>

#include <algorithm>
#include <string>

#include "operators/common/cpu_isa.hpp"
#include "operators/common/own_activation.hpp"
#include "operators/common/parallel.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {

// (AVX-512 only: AVX2 machines run these products as 1x1 convolutions, cpu/matmul.cpp's
// ConvRoute, in plans for one shape, and on oneDNN's gemm in plans for several.)
namespace packed_avx512 {
#pragma GCC push_options
#pragma GCC target("avx512f")
using V = __m512;
constexpr int kLanes = 16;
inline V vfmadd(V a, V b, V c) {
  return _mm512_fmadd_ps(a, b, c);
}
#include "operators/cpu/product_kernel.inc"

constexpr int kRows = 12;        // 24 accumulators of the 32 registers
constexpr int64_t kDepth = 256;  // weight rows per pass over a block: 32 KiB, in L1
constexpr int64_t kParallelFlops = int64_t{1} << 17;  // below this, one thread (a 1 x 128 x 5 head)

// One matrix product as the kernel reads it.
struct Operands {
  const float* a;  // rows of K floats, `lda` apart
  int64_t lda;
  const float* b;  // packed: [N' / kColumns][K][kColumns]
  float* y;        // rows of N floats, `ldy` apart
  int64_t ldy;
  const float* bias;      // N floats, or null
  const float* residual;  // rows of N floats `ldy` apart, or null
};

// What follows a block's sums, row by row in registers: the scale, the bias, the activation, the
// residual.
struct Epilogue {
  float scale;
  const float* bias;      // at the block's first column, or null
  const float* residual;  // at the block's first row and column, or null
  int64_t residual_stride;
  const FusedActivation* act;
  void operator()(int r, V& lo, V& hi) const {
    if (scale != 1.0f) {
      lo *= scale;
      hi *= scale;
    }
    if (bias) {
      lo += vload(bias);
      hi += vload(bias + kLanes);
    }
    lo = activate(lo, *act);
    hi = activate(hi, *act);
    if (residual) {
      lo += vload(residual + r * residual_stride);
      hi += vload(residual + r * residual_stride + kLanes);
    }
  }
};

// Y's rows [r0, r0 + rows) and columns [kColumns cb, kColumns (cb + 1)). A block past N's last
// whole one is computed into `tile`, its columns below N finished and copied out one by one.
void block(const Operands& o, int64_t k, int64_t n, float scale, const FusedActivation& act,
           int64_t r0, int64_t rows, int64_t cb) {
  const int64_t c0 = cb * kColumns;
  const float* b = o.b + cb * k * kColumns;
  const float* a = o.a + r0 * o.lda;
  const bool whole = c0 + kColumns <= n;
  alignas(64) float tile[kRows * kColumns];
  float* c = whole ? o.y + r0 * o.ldy + c0 : tile;
  const int64_t ldc = whole ? o.ldy : kColumns;
  const Epilogue finish{scale, o.bias ? o.bias + c0 : nullptr,
                        o.residual ? o.residual + r0 * o.ldy + c0 : nullptr, o.ldy, &act};
  const bool plain =
      scale == 1.0f && !o.bias && !o.residual && act.kind == FusedActivation::Kind::None;
  for (int64_t d0 = 0; d0 < k; d0 += kDepth) {
    const int64_t depth = std::min(kDepth, k - d0);
    if (d0 + depth < k || !whole || plain)
      product_block<kRows>(rows, a + d0, o.lda, b + d0 * kColumns, depth, c, ldc, d0 > 0);
    else
      product_block<kRows>(rows, a + d0, o.lda, b + d0 * kColumns, depth, c, ldc, d0 > 0, finish);
  }
  if (whole) return;
  for (int64_t r = 0; r < rows; ++r) {
    float* out = o.y + (r0 + r) * o.ldy + c0;
    const float* res = o.residual ? o.residual + (r0 + r) * o.ldy + c0 : nullptr;
    for (int64_t j = 0; j < n - c0; ++j) {
      float v = tile[r * kColumns + j] * scale;
      if (o.bias) v += o.bias[c0 + j];
      v = act.apply(v);
      out[j] = res ? v + res[j] : v;
    }
  }
}

// Every block of `count` products of the same M, K and N (operands(i) the i-th), on the threads
// where the work is worth a team. Row blocks innermost: a thread's consecutive blocks read the
// same packed columns.
template <class OperandsOf>
void run_blocks(int64_t count, int64_t m, int64_t k, int64_t n, float scale,
                const FusedActivation& act, int threads, const OperandsOf& operands) {
  const int64_t row_blocks = (m + kRows - 1) / kRows, column_blocks = (n + kColumns - 1) / kColumns;
  const int64_t per_product = row_blocks * column_blocks;
  parallel_for(count * per_product, threads > 1 && count * m * k * n >= kParallelFlops,
               [&](int64_t t) {
                 const int64_t i = t / per_product, cb = t % per_product / row_blocks,
                               r0 = t % row_blocks * kRows;
                 block(operands(i), k, n, scale, act, r0, std::min<int64_t>(kRows, m - r0), cb);
               });
}
#pragma GCC pop_options
}  // namespace packed_avx512

namespace {

constexpr int64_t kPackColumns = packed_avx512::kColumns;
// Floats of B packed at a run below which one thread packs them.
constexpr int64_t kParallelPack = int64_t{1} << 16;

int64_t packed_floats(int64_t k, int64_t n) {
  return (n + kPackColumns - 1) / kPackColumns * k * kPackColumns;
}

// Column block `cb` of B (k, n) read at k `k_stride` + n `n_stride`, into [K][32] at `to`,
// columns past N zero.
void pack_block(const float* b, int64_t k, int64_t n, int64_t k_stride, int64_t n_stride,
                int64_t cb, float* to) {
  for (int64_t row = 0; row < k; ++row, to += kPackColumns)
    for (int64_t lane = 0; lane < kPackColumns; ++lane) {
      const int64_t col = cb * kPackColumns + lane;
      to[lane] = col < n ? b[row * k_stride + col * n_stride] : 0.0f;
    }
}

// [N' / 32][K][32] from weights read at k `k_stride` + n `n_stride`.
std::shared_ptr<const Tensor> pack_weights(const float* w, int64_t k, int64_t n, int64_t k_stride,
                                           int64_t n_stride, int threads) {
  auto packed =
      std::make_shared<Tensor>(allocate_lasting_tensor(DType::Float, {packed_floats(k, n)}));
  float* out = packed->data<float>();
  parallel_for((n + kPackColumns - 1) / kPackColumns, threads > 1, [&](int64_t cb) {
    pack_block(w, k, n, k_stride, n_stride, cb, out + cb * k * kPackColumns);
  });
  return packed;
}

bool activates_in_lanes(const FusedActivation& act) {
  using Kind = FusedActivation::Kind;
  // (The others, GELU's among them, would run an element at a time: see activate.)
  return act.kind == Kind::None || act.kind == Kind::Relu || act.kind == Kind::Clip ||
         act.kind == Kind::LeakyRelu || takes_exp(act.kind);
}

}  // namespace

bool packed_product_suits(const InferContext& ctx, int64_t k, int64_t n,
                          const FusedActivation& act) {
  return ctx.shapes_vary() && k * n <= kPackedProductMaxWeights && activates_in_lanes(act) &&
         cpu_has_avx512() && cpu_has_avx512f();
}

std::shared_ptr<const PackedProduct> plan_packed_product(InferContext& ctx, const Tensor& w,
                                                         int64_t k, int64_t n, int64_t k_stride,
                                                         int64_t n_stride, bool has_bias,
                                                         const FusedActivation& act,
                                                         bool residual) {
  auto p = std::make_shared<PackedProduct>();
  p->k = k;
  p->n = n;
  p->act = act;
  p->has_bias = has_bias;
  p->residual = residual;
  // Packed once per session: every plan of the node (each new input shape) shares the copy.
  std::string key = "packed product";
  const int64_t words[] = {static_cast<int64_t>(reinterpret_cast<uintptr_t>(w.raw())), k, n,
                           k_stride, n_stride};
  key.append(reinterpret_cast<const char*>(words), sizeof words);
  NodeMemo* memo = ctx.memo();
  if (memo) p->weights = std::static_pointer_cast<const Tensor>(memo->find(key));
  if (!p->weights) {
    p->weights = pack_weights(w.data<float>(), k, n, k_stride, n_stride, ctx.threads());
    if (memo) memo->keep(key, std::const_pointer_cast<Tensor>(p->weights));
  }
  return p;
}

void run_packed_product(const PackedProduct& p, const float* a, int64_t rows, const float* bias,
                        const float* residual, float* y, int threads) {
  const packed_avx512::Operands o{a,
                                  p.k,
                                  p.weights->data<float>(),
                                  y,
                                  p.n,
                                  p.has_bias ? bias : nullptr,
                                  p.residual ? residual : nullptr};
  packed_avx512::run_blocks(1, rows, p.k, p.n, 1.0f, p.act, threads,
                            [&](int64_t) -> const packed_avx512::Operands& { return o; });
}

std::shared_ptr<const PackedBatches> plan_packed_batches(InferContext& ctx, const MatMulShapes& s,
                                                         const std::vector<int64_t>& a_strides,
                                                         const std::vector<int64_t>& b_strides,
                                                         const std::vector<int64_t>& y_strides,
                                                         float scale, const FusedActivation& act) {
  const size_t r = s.out.size();
  if (!ctx.shapes_vary() || !activates_in_lanes(act) || !cpu_has_avx512() || !cpu_has_avx512f() ||
      r < 2 || s.a.size() != r || s.b.size() != r || a_strides.size() != r ||
      b_strides.size() != r || y_strides.size() != r || a_strides[r - 1] != 1 ||
      y_strides[r - 1] != 1)
    return nullptr;
  auto p = std::make_shared<PackedBatches>();
  p->m = s.m;
  p->k = s.k;
  p->n = s.n;
  p->lda = a_strides[r - 2];
  p->ldy = y_strides[r - 2];
  p->b_k_stride = b_strides[r - 2];
  p->b_n_stride = b_strides[r - 1];
  p->scale = scale;
  p->act = act;
  // Each output matrix's operands, broadcast batch axes (of size 1) read at offset 0.
  const int64_t count = numel_of(Shape(s.out.begin(), s.out.end() - 2));
  for (int64_t i = 0; i < count; ++i) {
    int64_t a_at = 0, b_at = 0, y_at = 0;
    for (size_t d = r - 2, rest = static_cast<size_t>(i); d-- > 0;) {
      const int64_t at = static_cast<int64_t>(rest) % s.out[d];
      rest /= static_cast<size_t>(s.out[d]);
      if (s.a[d] != 1) a_at += at * a_strides[d];
      if (s.b[d] != 1) b_at += at * b_strides[d];
      y_at += at * y_strides[d];
    }
    p->a_at.push_back(a_at);
    p->b_at.push_back(b_at);
    p->y_at.push_back(y_at);
  }
  ctx.request_scratch(static_cast<size_t>(count * packed_floats(p->k, p->n)) * sizeof(float));
  return p;
}

void run_packed_batches(const PackedBatches& p, const float* a, const float* b, float* y,
                        void* scratch, int threads) {
  const int64_t count = static_cast<int64_t>(p.y_at.size()), per = packed_floats(p.k, p.n);
  const int64_t blocks = per / (p.k * kPackColumns);
  float* packed = static_cast<float*>(scratch);
  // B's matrices packed first (a pass over B), then the products on them.
  parallel_for(count * blocks, threads > 1 && count * p.k * p.n >= kParallelPack, [&](int64_t t) {
    const int64_t i = t / blocks, cb = t % blocks;
    pack_block(b + p.b_at[static_cast<size_t>(i)], p.k, p.n, p.b_k_stride, p.b_n_stride, cb,
               packed + i * per + cb * p.k * kPackColumns);
  });
  packed_avx512::run_blocks(count, p.m, p.k, p.n, p.scale, p.act, threads, [&](int64_t i) {
    const size_t at = static_cast<size_t>(i);
    return packed_avx512::Operands{a + p.a_at[at], p.lda,   packed + i * per, y + p.y_at[at],
                                   p.ldy,          nullptr, nullptr};
  });
}

}  // namespace volt
