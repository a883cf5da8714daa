// MatMul and Gemm on cuBLAS. fp16 inputs run on tensor cores with fp32 accumulation
// (CUBLAS_COMPUTE_32F); fp32 keeps full fp32 (no TF32), so results match the CPU's to fp32
// rounding. Row-major operands are passed as their column-major transposes: C^T = B^T A^T.
#include "operators/common/shape_util.hpp"
#include "operators/cuda/cuda_kernel.hpp"
#include "operators/cuda/gemm.hpp"

namespace volt::cuda {

cudaDataType_t cuda_type(DType t) {
  return t == DType::Float16 ? CUDA_R_16F : CUDA_R_32F;
}

void gemm(cublasHandle_t h, DType t, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
          float alpha, const void* a, int64_t stride_a, const void* b, int64_t stride_b, float beta,
          void* c, int64_t stride_c, int64_t batch) {
  const int64_t lda = trans_a ? m : k, ldb = trans_b ? k : n;
  // Column-major view: C^T[n,m] = op(B)^T op(A)^T.
  VOLT_CUDA_CALL(cublasGemmStridedBatchedEx(
      h, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b, cuda_type(t),
      static_cast<int>(ldb), stride_b, a, cuda_type(t), static_cast<int>(lda), stride_a, &beta, c,
      cuda_type(t), static_cast<int>(n), stride_c, static_cast<int>(batch), CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT));
}

void assign_broadcast(const RunContext& ctx, Tensor& y, const Tensor& c) {
  Broadcast s;
  s.rank = 2;
  const auto sc = broadcast_strides(c.shape(), y.shape());
  for (int d = 0; d < 2; ++d) {
    s.dims[d] = y.dim(static_cast<size_t>(d));
    s.b_strides[d] = sc[static_cast<size_t>(d)];
  }
  launch_binary(BinaryOp::AssignB, elem_of(y.dtype(), ctx), y.raw(), y.raw(), c.raw(), y.numel(), s,
                ctx.stream());
  check_launch("binary_kernel");
}

namespace {

// MatMul with numpy semantics where each operand's batch is either everything or one matrix
// (the shapes models use: [B..., M, K] x [K, N], [B..., M, K] x [B..., K, N]).
class MatMul final : public Kernel {
 public:
  explicit MatMul(const Node&) {}
  void infer(InferContext& ctx) const override {
    Shape a = ctx.shape(0), b = ctx.shape(1);
    if (a.empty() || b.empty()) ctx.input_error("MatMul of a scalar");
    if (ctx.dtype(0) != ctx.dtype(1)) ctx.input_error("inputs differ in dtype");
    const bool vec_a = a.size() == 1, vec_b = b.size() == 1;
    if (vec_a) a.insert(a.begin(), 1);
    if (vec_b) b.push_back(1);
    if (a.back() != b[b.size() - 2])
      ctx.input_error("inner dimensions differ: " + shape_str(ctx.shape(0)) + " x " +
                      shape_str(ctx.shape(1)));
    const Shape batch_a(a.begin(), a.end() - 2), batch_b(b.begin(), b.end() - 2);
    Shape out = broadcast_shapes({batch_a, batch_b}, ctx.node());
    const int64_t batch = numel_of(out);
    if ((numel_of(batch_a) != batch && numel_of(batch_a) != 1) ||
        (numel_of(batch_b) != batch && numel_of(batch_b) != 1))
      throw KernelUnsupported{"CUDA MatMul broadcasts whole batches only"};
    if (!vec_a) out.push_back(a[a.size() - 2]);
    if (!vec_b) out.push_back(b.back());
    ctx.set_output(0, ctx.dtype(0), out);
  }
  void run(RunContext& ctx) const override {
    const Tensor &a = ctx.input(0), &b = ctx.input(1);
    Tensor& y = ctx.output(0);
    const int64_t k = a.dim(a.rank() - 1);
    const int64_t m = a.rank() == 1 ? 1 : a.dim(a.rank() - 2);
    const int64_t n = b.rank() == 1 ? 1 : b.dim(b.rank() - 1);
    const int64_t batch = m && n ? y.numel() / (m * n) : 0;
    if (batch == 0) return;
    const int64_t batch_a = a.numel() / (m * k), batch_b = b.numel() / (k * n);
    gemm(blas(ctx, y), a.dtype(), false, false, m, n, k, 1.f, a.raw(), batch_a == 1 ? 0 : m * k,
         b.raw(), batch_b == 1 ? 0 : k * n, 0.f, y.raw(), m * n, batch);
  }
};

// Y = alpha op(A) op(B) + beta C, C broadcast to [M, N] first.
class Gemm final : public Kernel {
 public:
  explicit Gemm(const Node& n)
      : trans_a_(n.attr_int("transA", 0) != 0),
        trans_b_(n.attr_int("transB", 0) != 0),
        alpha_(n.attr_float("alpha", 1.f)),
        beta_(n.attr_float("beta", 1.f)) {}
  void infer(InferContext& ctx) const override {
    const Shape &a = ctx.shape(0), &b = ctx.shape(1);
    if (a.size() != 2 || b.size() != 2) ctx.input_error("Gemm takes 2-D A and B");
    const int64_t m = trans_a_ ? a[1] : a[0], k = trans_a_ ? a[0] : a[1];
    const int64_t kb = trans_b_ ? b[1] : b[0], n = trans_b_ ? b[0] : b[1];
    if (k != kb) ctx.input_error("inner dimensions differ");
    if (ctx.has_input(2) &&
        broadcast_shapes({ctx.shape(2), Shape{m, n}}, ctx.node()) != Shape{m, n})
      ctx.input_error("C " + shape_str(ctx.shape(2)) + " does not broadcast to [M, N]");
    ctx.set_output(0, ctx.dtype(0), {m, n});
  }
  void run(RunContext& ctx) const override {
    const Tensor &a = ctx.input(0), &b = ctx.input(1);
    Tensor& y = ctx.output(0);
    const int64_t m = y.dim(0), n = y.dim(1), k = trans_a_ ? a.dim(0) : a.dim(1);
    float beta = 0.f;
    if (ctx.has_input(2) && beta_ != 0.f && y.numel()) {
      assign_broadcast(ctx, y, ctx.input(2));
      beta = beta_;
    }
    if (m && n)
      gemm(blas(ctx, y), a.dtype(), trans_a_, trans_b_, m, n, k, alpha_, a.raw(), 0, b.raw(), 0,
           beta, y.raw(), 0, 1);
  }

 private:
  bool trans_a_, trans_b_;
  float alpha_, beta_;
};

}  // namespace

VOLT_REGISTER_KERNEL(cuda_matmul, cuda_kernel("MatMul", 1, make_kernel<MatMul>));
VOLT_REGISTER_KERNEL(cuda_gemm, cuda_kernel("Gemm", 7, make_kernel<Gemm>));

}  // namespace volt::cuda
