#include "operators/common/gemm_weights.hpp"

#include "operators/common/cpu_isa.hpp"

namespace volt {

// Constant fp32 weights [K, N] where oneDNN's AVX2 gemm (its matmul without AVX-512, which
// leaves format any row-major) reads them slowly, and the layout it reads faster:
// - products of 2 to 31 rows, N a multiple of 64: rows 16 floats longer than N. Rows of a
//   multiple of 256 bytes fall on the same cache sets, and for products of few rows the gemm
//   reads B in place: 8x768x3072 ran at 66 GFLOP/s with rows of 3072 floats and at 119 with
//   3088 (Zen 3, 2 threads, a /tmp benchmark of the primitive; M x K x N, mean of 3 alternating
//   runs, ms): 8x768x3072 0.52 -> 0.26, 8x3072x768 0.32 -> 0.24, 8x2048x512 0.19 -> 0.11. One
//   row gained nothing (1x768x3072 0.090 -> 0.085, 1x3072x768 0.076 -> 0.079). Products of more
//   rows gained 0-20% (197x768x768 1.81 -> 1.45, 196x1536x384 1.54 -> 1.37), but the padded
//   copy costs what the row-major one does not (oneDNN hands format any its own rows, and packs
//   padded ones with its generic reorder): BERT-base's first run 248 -> 381 ms and its peak RSS
//   524 -> 574 MiB, so they keep the rule below.
// - otherwise transposed where K <= N, for products of 32 rows or more (this plan's rows; a
//   shape-generic primitive made for fewer keeps row-major weights): 32x4096x1000 ran 5.6 ms
//   row-major, 6.9 transposed; the GPT-2 step's one-row products were slower transposed.
// One matrix only (no batch of weights), held row-major (transposed, the padded copy is a
// transposition).
namespace {

dnnl::memory::desc avx2_weights_md(const dnnl::memory::desc& b, dnnl::memory::data_type weights_dt,
                                   int64_t rows) {
  const auto d = b.dims();
  const size_t r = d.size();
  bool one_matrix = r >= 2 && !cpu_has_avx512() && weights_dt == dnnl::memory::data_type::f32;
  for (size_t i = 0; i + 2 < r; ++i) one_matrix = one_matrix && d[i] == 1;
  if (!one_matrix) return {};
  const int64_t k = d[r - 2], n = d[r - 1];
  const bool row_major =
      b.data.format_kind == dnnl_blocked && b.data.format_desc.blocking.strides[r - 1] == 1;
  dnnl::memory::dims strides(r);
  if (n % 64 == 0 && row_major && rows > 1 && rows < 32) {
    strides[r - 1] = 1;
    strides[r - 2] = n + 16;
  } else if (rows >= 32 && k <= n) {
    strides[r - 2] = 1;  // K: consecutive
    strides[r - 1] = k;  // N: one column of K after another
  } else {
    return {};
  }
  const int64_t matrix = strides[r - 1] == 1 ? k * (n + 16) : k * n;
  for (size_t i = 0; i + 2 < r; ++i) strides[i] = matrix;  // dimensions of 1
  return dnnl::memory::desc(d, weights_dt, strides);
}

}  // namespace

dnnl::memory::desc packed_weights_md(const dnnl::memory::desc& b,
                                     dnnl::memory::data_type weights_dt, int64_t rows) {
  const dnnl::memory::desc faster = avx2_weights_md(b, weights_dt, rows);
  return faster.is_zero() ? dnnl::memory::desc(b.dims(), weights_dt, dnnl::memory::format_tag::any)
                          : faster;
}

}  // namespace volt
