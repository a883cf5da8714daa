#include "operators/cpu/packed_product.hpp"

#include <immintrin.h>

#include <algorithm>
#include <string>

#include "operators/common/cpu_isa.hpp"
#include "operators/common/own_activation.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/shape_util.hpp"
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

// What follows a block's sums: the bias, the activation, the residual, over the block's rows as
// product_rows stored them (in L1). The common activations (`kind`: 0 none, 1 ReLU) in lanes
// without a call; the others through activate.
template <int kind>
void finish_rows(float* c, int64_t ldc, int64_t rows, const float* bias, const float* residual,
                 int64_t residual_stride, const FusedActivation& act) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = c + r * ldc;
    V lo = vload(row), hi = vload(row + kLanes);
    if (bias) {
      lo += vload(bias);
      hi += vload(bias + kLanes);
    }
    if constexpr (kind == 1) {  // (comparisons with NaN are false: NaN stays NaN)
      lo = lo < 0 ? V{} : lo;
      hi = hi < 0 ? V{} : hi;
    } else if constexpr (kind != 0) {
      lo = activate(lo, act);
      hi = activate(hi, act);
    }
    if (residual) {
      lo += vload(residual + r * residual_stride);
      hi += vload(residual + r * residual_stride + kLanes);
    }
    vstore(row, lo);
    vstore(row + kLanes, hi);
  }
}
void finish_block(float* c, int64_t ldc, int64_t rows, const float* bias, const float* residual,
                  int64_t residual_stride, const FusedActivation& act) {
  using Kind = FusedActivation::Kind;
  if (act.kind == Kind::None)
    finish_rows<0>(c, ldc, rows, bias, residual, residual_stride, act);
  else if (act.kind == Kind::Relu)
    finish_rows<1>(c, ldc, rows, bias, residual, residual_stride, act);
  else
    finish_rows<2>(c, ldc, rows, bias, residual, residual_stride, act);
}

// Y's rows [r0, r0 + rows) and columns [kColumns cb, kColumns (cb + 1)) from A's rows (`lda`
// floats apart) and B packed ([N' / 32][K][32] at `packed`), into Y's rows (`ldy` apart). A block
// past N's last whole one is computed into `tile`, its columns below N finished and copied out
// one by one.
void block(const PackedProduct& p, const float* packed, const float* a, int64_t lda, int64_t r0,
           int64_t rows, int64_t cb, const float* bias, const float* residual, float* y,
           int64_t ldy) {
  const int64_t n = p.n, k = p.k, c0 = cb * kColumns;
  const float* b = packed + cb * k * kColumns;
  const bool whole = c0 + kColumns <= n;
  alignas(64) float tile[kRows * kColumns];
  float* c = whole ? y + r0 * ldy + c0 : tile;
  const int64_t ldc = whole ? ldy : kColumns;
  for (int64_t d0 = 0; d0 < k; d0 += kDepth) {
    const int64_t depth = std::min(kDepth, k - d0);
    product_block<kRows>(rows, a + r0 * lda + d0, lda, b + d0 * kColumns, depth, c, ldc, d0 > 0);
  }
  if (whole) {
    // (Finished here rather than in product_rows' registers: see product_kernel.inc. 160 rows of
    // 128 x 512 weights with a bias and ReLU took 52.6-53.7 us that way against oneDNN's
    // fixed-size kernel's 44.2-45.0.)
    if (bias || residual || p.act.kind != FusedActivation::Kind::None)
      finish_block(c, ldc, rows, bias ? bias + c0 : nullptr,
                   residual ? residual + r0 * n + c0 : nullptr, n, p.act);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    float* out = y + (r0 + r) * ldy + c0;
    const float* res = residual ? residual + (r0 + r) * n + c0 : nullptr;
    for (int64_t j = 0; j < n - c0; ++j) {
      float v = tile[r * kColumns + j];
      if (bias) v += bias[c0 + j];
      v = p.act.apply(v);
      out[j] = res ? v + res[j] : v;
    }
  }
}

void run(const PackedProduct& p, const float* a, int64_t rows, const float* bias,
         const float* residual, float* y, int threads) {
  const int64_t row_blocks = (rows + kRows - 1) / kRows,
                column_blocks = (p.n + kColumns - 1) / kColumns;
  const float* packed = p.weights->data<float>();
  // Row blocks inner: a thread's consecutive blocks read the same packed columns.
  parallel_for(row_blocks * column_blocks, threads > 1 && rows * p.k * p.n >= kParallelFlops,
               [&](int64_t t) {
                 const int64_t cb = t / row_blocks, r0 = t % row_blocks * kRows;
                 block(p, packed, a, p.k, r0, std::min<int64_t>(kRows, rows - r0), cb, bias,
                       residual, y, p.n);
               });
}

// B's columns [kColumns cb, kColumns (cb + 1)) into `to` ([K][32], columns past N zero), each
// value times `scale`.
void pack_columns(const float* b, int64_t k, int64_t n, int64_t k_stride, int64_t n_stride,
                  float scale, int64_t cb, float* to) {
  const int64_t c0 = cb * kColumns, width = std::min<int64_t>(kColumns, n - c0);
  for (int64_t row = 0; row < k; ++row, to += kColumns) {
    const float* from = b + row * k_stride + c0 * n_stride;
    int64_t j = 0;
    if (n_stride == 1)
      for (; j < width; ++j) to[j] = from[j] * scale;
    else
      for (; j < width; ++j) to[j] = from[j * n_stride] * scale;
    for (; j < kColumns; ++j) to[j] = 0.0f;
  }
}

void run_computed(const ComputedProduct& p, const float* a, const float* b, float* y, float* packed,
                  int threads) {
  const int64_t column_blocks = (p.n + kColumns - 1) / kColumns,
                row_blocks = (p.m + kRows - 1) / kRows, batches = numel_of(p.batch);
  const int64_t packed_floats = column_blocks * p.k * kColumns;
  // The element offsets of batch `bi`'s A, B and Y.
  auto offsets = [&](int64_t bi, int64_t& oa, int64_t& ob, int64_t& oy) {
    oa = ob = oy = 0;
    for (size_t i = p.batch.size(); i-- > 0;) {
      const int64_t index = bi % p.batch[i];
      bi /= p.batch[i];
      oa += index * p.a_batch[i];
      ob += index * p.b_batch[i];
      oy += index * p.y_batch[i];
    }
  };
  const bool parallel = threads > 1 && batches * p.m * p.k * p.n >= kParallelFlops;
  parallel_for(batches * column_blocks, parallel, [&](int64_t t) {
    int64_t oa, ob, oy;
    offsets(t / column_blocks, oa, ob, oy);
    pack_columns(b + ob, p.k, p.n, p.b_k, p.b_n, p.scale, t % column_blocks,
                 packed + t / column_blocks * packed_floats + t % column_blocks * p.k * kColumns);
  });
  PackedProduct plain;
  plain.k = p.k;
  plain.n = p.n;
  // Row blocks inner, as in run; then the column blocks, then the batches.
  parallel_for(batches * column_blocks * row_blocks, parallel, [&](int64_t t) {
    const int64_t bi = t / (column_blocks * row_blocks), cb = t / row_blocks % column_blocks,
                  r0 = t % row_blocks * kRows;
    int64_t oa, ob, oy;
    offsets(bi, oa, ob, oy);
    block(plain, packed + bi * packed_floats, a + oa, p.lda, r0, std::min<int64_t>(kRows, p.m - r0),
          cb, nullptr, nullptr, y + oy, p.ldy);
  });
}
void product_with_packed(const float* a, int64_t lda, int64_t rows, const float* packed, int64_t k,
                         int64_t n, float* y, int64_t ldy) {
  PackedProduct plain;
  plain.k = k;
  plain.n = n;
  // Row blocks inner, as in run: consecutive blocks read the same packed columns.
  for (int64_t cb = 0; cb * kColumns < n; ++cb)
    for (int64_t r0 = 0; r0 < rows; r0 += kRows)
      block(plain, packed, a, lda, r0, std::min<int64_t>(kRows, rows - r0), cb, nullptr, nullptr, y,
            ldy);
}
#pragma GCC pop_options
}  // namespace packed_avx512

namespace {

constexpr int64_t kPackColumns = packed_avx512::kColumns;

// [N' / 32][K][32] from weights read at k `k_stride` + n `n_stride` (in blocks of `k_block` rows
// at `block_stride`: see plan_packed_product), columns past N zero.
std::shared_ptr<const Tensor> pack_weights(const float* w, int64_t k, int64_t n, int64_t k_stride,
                                           int64_t n_stride, int64_t k_block, int64_t block_stride,
                                           int threads) {
  const int64_t blocks = (n + kPackColumns - 1) / kPackColumns;
  auto packed =
      std::make_shared<Tensor>(allocate_lasting_tensor(DType::Float, {blocks * k * kPackColumns}));
  float* out = packed->data<float>();
  parallel_for(blocks, threads > 1, [&](int64_t cb) {
    for (int64_t row = 0; row < k; ++row) {
      float* to = out + (cb * k + row) * kPackColumns;
      const float* from = w + row % k_block * k_stride + row / k_block * block_stride;
      for (int64_t lane = 0; lane < kPackColumns; ++lane) {
        const int64_t col = cb * kPackColumns + lane;
        to[lane] = col < n ? from[col * n_stride] : 0.0f;
      }
    }
  });
  return packed;
}

}  // namespace

bool packed_product_suits(const InferContext& ctx, int64_t k, int64_t n,
                          const FusedActivation& act) {
  using Kind = FusedActivation::Kind;
  // (The others, GELU's among them, would run an element at a time: see activate.)
  const bool in_lanes = act.kind == Kind::None || act.kind == Kind::Relu ||
                        act.kind == Kind::Clip || act.kind == Kind::LeakyRelu ||
                        takes_exp(act.kind);
  return ctx.shapes_vary() && k * n <= kPackedProductMaxWeights && in_lanes && cpu_has_avx512() &&
         cpu_has_avx512f();
}

std::shared_ptr<const PackedProduct> plan_packed_product(InferContext& ctx, const Tensor& w,
                                                         int64_t k, int64_t n, int64_t k_stride,
                                                         int64_t n_stride, bool has_bias,
                                                         const FusedActivation& act, bool residual,
                                                         int64_t k_block, int64_t block_stride) {
  if (k_block <= 0) k_block = k;
  auto p = std::make_shared<PackedProduct>();
  p->k = k;
  p->n = n;
  p->act = act;
  p->has_bias = has_bias;
  p->residual = residual;
  // Packed once per session: every plan of the node (each new input shape) shares the copy.
  std::string key = "packed product";
  const int64_t words[] = {static_cast<int64_t>(reinterpret_cast<uintptr_t>(w.raw())),
                           k,
                           n,
                           k_stride,
                           n_stride,
                           k_block,
                           block_stride};
  key.append(reinterpret_cast<const char*>(words), sizeof words);
  NodeMemo* memo = ctx.memo();
  if (memo) p->weights = std::static_pointer_cast<const Tensor>(memo->find(key));
  if (!p->weights) {
    p->weights = pack_weights(w.data<float>(), k, n, k_stride, n_stride, k_block, block_stride,
                              ctx.threads());
    if (memo) memo->keep(key, std::const_pointer_cast<Tensor>(p->weights));
  }
  return p;
}

bool computed_product_suits(const InferContext& ctx) {
  return ctx.shapes_vary() && cpu_has_avx512() && cpu_has_avx512f();
}

size_t computed_product_scratch(const ComputedProduct& p) {
  const int64_t columns = (p.n + kPackColumns - 1) / kPackColumns * kPackColumns;
  return static_cast<size_t>(numel_of(p.batch) * p.k * columns) * sizeof(float);
}

void run_computed_product(const ComputedProduct& p, const float* a, const float* b, float* y,
                          void* scratch, int threads) {
  packed_avx512::run_computed(p, a, b, y, static_cast<float*>(scratch), threads);
}

int64_t packed_floats(int64_t k, int64_t n) {
  return (n + kPackColumns - 1) / kPackColumns * kPackColumns * k;
}

void pack_operand(const float* b, int64_t k, int64_t n, int64_t k_stride, int64_t n_stride,
                  float scale, float* to) {
  for (int64_t cb = 0; cb * kPackColumns < n; ++cb)
    packed_avx512::pack_columns(b, k, n, k_stride, n_stride, scale, cb, to + cb * k * kPackColumns);
}

void product_with_packed(const float* a, int64_t lda, int64_t rows, const float* packed, int64_t k,
                         int64_t n, float* y, int64_t ldy) {
  packed_avx512::product_with_packed(a, lda, rows, packed, k, n, y, ldy);
}

void run_packed_product(const PackedProduct& p, const float* a, int64_t rows, const float* bias,
                        const float* residual, float* y, int threads) {
  packed_avx512::run(p, a, rows, p.has_bias ? bias : nullptr, p.residual ? residual : nullptr, y,
                     threads);
}

}  // namespace volt
