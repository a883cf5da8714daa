// CSR inputs: sparse × dense products for MatMul and Gemm (input 0 sparse), and Densify, the
// explicit dense copy the planner inserts before every other consumer of a CSR input.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "operators/common/dispatch.hpp"
#include "operators/common/epilogue.hpp"
#include "operators/common/float_vectors.hpp"
#include "operators/common/simd_clones.hpp"
#include "operators/registry.hpp"
#include "runtime/csr_util.hpp"

namespace volt {
namespace {

// y[0..n) += alpha · Σ val[i] · B[col[i], 0..n) over i in [begin, end): one row's non-zeros (or
// those in one panel). The sum is kept in registers 64 floats at a time and added to y once,
// rather than y being loaded and stored for every non-zero (a store-to-load chain that would
// cost several times the arithmetic). Inlined into the row loops below, which are compiled for
// AVX-512 and AVX2 with a run-time choice (function multiversioning); 16 floats as one
// Floats16 (float_vectors.hpp).
inline void accumulate_row(const int64_t* col, const float* val, int64_t begin, int64_t end,
                           const float* b, int64_t n, float alpha, float* __restrict y) {
  int64_t j0 = 0;
  Floats16 v0, v1, v2, v3;
  for (; j0 + 64 <= n; j0 += 64) {
    Floats16 a0 = {}, a1 = {}, a2 = {}, a3 = {};
    for (int64_t i = begin; i < end; ++i) {
      const float a = val[i];
      const float* br = b + col[i] * n + j0;
      load16(v0, br), load16(v1, br + 16), load16(v2, br + 32), load16(v3, br + 48);
      a0 += a * v0, a1 += a * v1, a2 += a * v2, a3 += a * v3;
    }
    add_to16(y + j0, alpha * a0);
    add_to16(y + j0 + 16, alpha * a1);
    add_to16(y + j0 + 32, alpha * a2);
    add_to16(y + j0 + 48, alpha * a3);
  }
  for (; j0 + 16 <= n; j0 += 16) {
    Floats16 a0 = {};
    for (int64_t i = begin; i < end; ++i) load16(v0, b + col[i] * n + j0), a0 += val[i] * v0;
    add_to16(y + j0, alpha * a0);
  }
  for (; j0 < n; ++j0) {
    float a0 = 0;
    for (int64_t i = begin; i < end; ++i) a0 += val[i] * b[col[i] * n + j0];
    y[j0] += alpha * a0;
  }
}
// B panels of this many bytes stay in L2 while every row's non-zeros in the panel's columns are
// applied to a block of Y rows of the same size (Zen 4 and recent Intel cores have 1-2 MiB of L2
// per core). Tuned on Zen 4 with CSR [4096 × 100000] × [100000 × 64] at 1%: 128 KiB panels took
// 1.8× as long, 2 MiB ones 1.4×.
constexpr int64_t kPanelBytes = 512 << 10;

// Rows [r0, r1) of Y, panel by panel: non-zeros must be sorted by column within each row.
VOLT_SIMD_CLONES void csr_rows_by_panel(const int64_t* off, const int64_t* col, const float* val,
                                        int64_t r0, int64_t r1, const float* b, int64_t k,
                                        int64_t n, float alpha, float* y) {
  const int64_t panel_rows = std::max<int64_t>(16, kPanelBytes / (n * 4));
  // Rows in blocks whose part of Y takes no more L2 than a panel.
  const int64_t block = std::max<int64_t>(8, kPanelBytes / (n * 4));
  std::vector<int64_t> cursor(off + r0, off + r1);
  for (int64_t rb = r0; rb < r1; rb += block) {
    const int64_t re = std::min(r1, rb + block);
    for (int64_t k0 = 0; k0 < k; k0 += panel_rows) {
      const int64_t k1 = std::min(k, k0 + panel_rows);
      for (int64_t r = rb; r < re; ++r) {
        int64_t& i = cursor[r - r0];
        const int64_t begin = i, end = off[r + 1];
        while (i < end && col[i] < k1) ++i;
        if (i > begin) accumulate_row(col, val, begin, i, b, n, alpha, y + r * n);
      }
    }
  }
}

// Rows [r0, r1) of Y, one row at a time (B small enough to stay in cache, or columns unsorted).
VOLT_SIMD_CLONES void csr_rows_direct(const int64_t* off, const int64_t* col, const float* val,
                                      int64_t r0, int64_t r1, const float* b, int64_t n,
                                      float alpha, float* y) {
  for (int64_t r = r0; r < r1; ++r)
    accumulate_row(col, val, off[r], off[r + 1], b, n, alpha, y + r * n);
}

bool columns_sorted(const CsrTensor& a) {
  const int64_t* off = a.row_offsets().data<int64_t>();
  const int64_t* col = a.col_indices().data<int64_t>();
  for (int64_t r = 0; r < a.rows(); ++r)
    for (int64_t i = off[r] + 1; i < off[r + 1]; ++i)
      if (col[i] < col[i - 1]) return false;
  return true;
}

// Y[M,N] = alpha · A[M,K] (CSR) · B[K,N] (dense, row-major) + (Y's initial contents). Rows are
// split between threads by equal shares of non-zeros; when B is larger than a panel, each
// thread walks B panel by panel so the rows of B it reads come from L2 rather than memory.
void csr_times_dense(const CsrTensor& a, const float* b, int64_t n, float alpha, float* y,
                     int threads) {
  const int64_t* off = a.row_offsets().data<int64_t>();
  const int64_t* col = a.col_indices().data<int64_t>();
  const float* val = a.values().data<float>();
  const int64_t m = a.rows(), k = a.cols(), nnz = a.nnz();
  const bool panels = k * n * 4 > 2 * kPanelBytes && columns_sorted(a);
  const int parts = nnz * n > 32768 ? std::max(1, threads) : 1;
#pragma omp parallel for schedule(static, 1) num_threads(parts) if (parts > 1)
  for (int p = 0; p < parts; ++p) {
    // This part's rows: from the first row whose offset reaches p/parts of the non-zeros.
    const int64_t lo = nnz * p / parts, hi = nnz * (p + 1) / parts;
    const int64_t r0 = p == 0 ? 0 : std::lower_bound(off, off + m + 1, lo) - off;
    const int64_t r1 = p + 1 == parts ? m : std::lower_bound(off, off + m + 1, hi) - off;
    if (r0 >= r1) continue;
    if (panels)
      csr_rows_by_panel(off, col, val, r0, r1, b, k, n, alpha, y);
    else
      csr_rows_direct(off, col, val, r0, r1, b, n, alpha, y);
  }
}

void transpose(const float* src, int64_t rows, int64_t cols, float* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
}

// MatMul(A sparse [M,K], B [K,N]) and Gemm(A sparse, B, C) with alpha, beta, transB.
class SparseMatMul final : public Kernel {
 public:
  explicit SparseMatMul(const Node& n)
      : gemm_(n.op_type == "Gemm"),
        alpha_(n.attr_float(gemm_ ? "alpha" : "volt.product_scale", 1.0f)),
        beta_(gemm_ ? n.attr_float("beta", 1.0f) : 1.0f),
        trans_b_(gemm_ && n.attr_int("transB", 0) != 0),
        trans_a_(gemm_ && n.attr_int("transA", 0) != 0),
        act_(FusedActivation::of(n)) {}

  struct State {
    Tensor b_rows;  // B as [K, N] rows when it was a constant that needed transposing
  };

  void infer(InferContext& ctx) const override {
    const TypeShape& a = ctx.input(0);
    if (trans_a_) ctx.error("transA of a CSR input (the planner densifies it)");
    if (a.dtype != DType::Float) ctx.error("sparse products are float32 (others are densified)");
    const TypeShape& b = ctx.input(1);
    if (b.shape.size() != 2 || b.dtype != DType::Float)
      ctx.input_error("a CSR input multiplies a 2-D float32 matrix, got " +
                      std::string(dtype_name(b.dtype)) + shape_str(b.shape));
    const int64_t k = trans_b_ ? b.shape[1] : b.shape[0], n = trans_b_ ? b.shape[0] : b.shape[1];
    if (k != a.shape[1])
      ctx.input_error("inner dimensions differ: " + shape_str(a.shape) + " × " +
                      shape_str(b.shape) + (trans_b_ ? "ᵀ" : ""));
    const int64_t m = a.shape[0];
    // Gemm's C, or a fused MatMul's bias ([N]).
    if (ctx.has_input(2)) {
      const Shape& c = ctx.input(2).shape;
      const bool ok = c.size() <= 2 && (c.empty() || c.back() == 1 || c.back() == n) &&
                      (c.size() < 2 || c[0] == 1 || c[0] == m);
      if (!ok)
        ctx.input_error("C of shape " + shape_str(c) + " does not broadcast to " +
                        shape_str({m, n}));
    }
    check_epilogue(ctx, {m, n}, /*bias=*/false);
    auto state = std::make_shared<State>();
    if (trans_b_) {
      if (const Tensor* bt = ctx.input_tensor(1)) {
        state->b_rows = Tensor::empty(DType::Float, {k, n});
        transpose(bt->data<float>(), n, k, state->b_rows.data<float>());
      } else {
        ctx.request_scratch(static_cast<size_t>(k * n) * sizeof(float));
      }
    }
    ctx.set_state(state);
    ctx.set_output(0, DType::Float, {m, n});
  }

  void run(RunContext& ctx) const override {
    const CsrTensor& a = ctx.input_value(0).csr();
    const Tensor& b = ctx.input(1);
    Tensor& y = ctx.output(0);
    const int64_t m = y.dim(0), n = y.dim(1);
    float* out = y.data<float>();
    // Y starts as beta · C broadcast, or zeros.
    if (ctx.has_input(2) && beta_ != 0.0f) {
      const Tensor& c = ctx.input(2);
      const int64_t cn = c.rank() == 0 ? 1 : c.shape().back();
      const int64_t cm = c.rank() == 2 ? c.dim(0) : 1;
      const float* cv = c.data<float>();
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < n; ++j)
          out[r * n + j] = beta_ * cv[(cm == 1 ? 0 : r) * cn + (cn == 1 ? 0 : j)];
    } else {
      std::memset(out, 0, y.nbytes());
    }
    const float* rows = b.data<float>();
    if (trans_b_) {
      const State& st = ctx.state<State>();
      if (st.b_rows.defined()) {
        rows = st.b_rows.data<float>();
      } else {
        float* scratch = static_cast<float*>(ctx.scratch());
        transpose(b.data<float>(), n, b.dim(1), scratch);
        rows = scratch;
      }
    }
    csr_times_dense(a, rows, n, alpha_, out, ctx.threads());
    // A fused MatMul epilogue: activation, then the residual.
    apply_epilogue(y, nullptr, act_, ctx.has_input(3) ? &ctx.input(3) : nullptr, ctx.node());
  }

 private:
  bool gemm_;
  float alpha_, beta_;
  bool trans_b_, trans_a_;
  FusedActivation act_;
};

// The dense copy of a CSR input, for consumers that need one.
class Densify final : public Kernel {
 public:
  explicit Densify(const Node&) {}
  void infer(InferContext& ctx) const override {
    const TypeShape& a = ctx.input(0);
    if (a.kind != ValueInfo::Kind::SparseTensor) ctx.error("Densify takes a CSR input");
    ctx.set_output(0, a.dtype, a.shape);
  }
  void run(RunContext& ctx) const override {
    csr_scatter_into(ctx.input_value(0).csr(), ctx.output(0));
  }
};

}  // namespace

VOLT_REGISTER_KERNEL(sparse_matmul, {.op = "MatMul",
                                     .priority = 100,
                                     .csr_input0 = true,
                                     .create = make_kernel<SparseMatMul>});
VOLT_REGISTER_KERNEL(sparse_gemm, {.op = "Gemm",
                                   .priority = 100,
                                   .csr_input0 = true,
                                   .create = make_kernel<SparseMatMul>});
VOLT_REGISTER_KERNEL(densify, {.domain = kVoltDomain,
                               .op = "Densify",
                               .foldable = false,
                               .csr_input0 = true,
                               .create = make_kernel<Densify>});

}  // namespace volt
