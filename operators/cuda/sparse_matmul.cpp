// MatMul and Gemm whose A is a CSR graph input (moved to the device as it is, see
// densify_sparse_inputs) on cusparseSpMM: Y[M,N] = alpha A[M,K] B[K,N] + beta C, fp32, B and Y
// row-major. Gemm's transB is declined at plan time (the node then runs on the host, where the
// executor brings the CSR matrix back).
#include "operators/common/shape_util.hpp"
#include "operators/cuda/cuda_kernel.hpp"
#include "operators/cuda/gemm.hpp"

namespace volt::cuda {
namespace {

// Owning cuSPARSE descriptors.
struct SparseMat {
  cusparseSpMatDescr_t d = nullptr;
  explicit SparseMat(const CsrTensor& a) {
    VOLT_CUDA_CALL(cusparseCreateCsr(
        &d, a.rows(), a.cols(), a.nnz(), const_cast<void*>(a.row_offsets().raw()),
        const_cast<void*>(a.col_indices().raw()), const_cast<void*>(a.values().raw()),
        CUSPARSE_INDEX_64I, CUSPARSE_INDEX_64I, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_32F));
  }
  ~SparseMat() { cusparseDestroySpMat(d); }
  SparseMat(const SparseMat&) = delete;
  SparseMat& operator=(const SparseMat&) = delete;
};

struct DenseMat {
  cusparseDnMatDescr_t d = nullptr;
  DenseMat(int64_t rows, int64_t cols, const void* data) {
    VOLT_CUDA_CALL(cusparseCreateDnMat(&d, rows, cols, cols, const_cast<void*>(data), CUDA_R_32F,
                                       CUSPARSE_ORDER_ROW));
  }
  ~DenseMat() { cusparseDestroyDnMat(d); }
  DenseMat(const DenseMat&) = delete;
  DenseMat& operator=(const DenseMat&) = delete;
};

class SparseMatMul final : public Kernel {
 public:
  explicit SparseMatMul(const Node& n)
      : gemm_(n.op_type == "Gemm"),
        alpha_(gemm_ ? n.attr_float("alpha", 1.0f) : 1.0f),
        beta_(gemm_ ? n.attr_float("beta", 1.0f) : 1.0f),
        trans_a_(gemm_ && n.attr_int("transA", 0) != 0),
        trans_b_(gemm_ && n.attr_int("transB", 0) != 0) {}
  void infer(InferContext& ctx) const override {
    const TypeShape &a = ctx.input(0), &b = ctx.input(1);
    if (trans_a_ || trans_b_) throw KernelUnsupported{"cuSPARSE SpMM here: no transposes"};
    if (a.dtype != DType::Float || b.dtype != DType::Float)
      throw KernelUnsupported{"cuSPARSE SpMM here: float32"};
    if (b.shape.size() != 2 || a.shape.size() != 2 || b.shape[0] != a.shape[1])
      ctx.input_error("a CSR input multiplies a 2-D matrix of matching rows, got " +
                      shape_str(a.shape) + " x " + shape_str(b.shape));
    const Shape y{a.shape[0], b.shape[1]};
    if (ctx.has_input(2) && broadcast_shapes({ctx.shape(2), y}, ctx.node()) != y)
      ctx.input_error("C " + shape_str(ctx.shape(2)) + " does not broadcast to " + shape_str(y));
    ctx.set_output(0, DType::Float, y);
  }
  void run(RunContext& ctx) const override {
    const CsrTensor& a = ctx.input_value(0).csr();
    const Tensor& b = ctx.input(1);
    Tensor& y = ctx.output(0);
    if (!y.numel()) return;
    float beta = 0.f;
    if (ctx.has_input(2) && beta_ != 0.f) {  // Y = C broadcast, then beta scales it in SpMM
      assign_broadcast(ctx, y, ctx.input(2));
      beta = beta_;
    }
    if (a.nnz() == 0 || a.cols() == 0) {  // the product is zero: Y = beta C, or zeros
      if (beta == 0.f)
        launch_fill(Elem::F32, y.raw(), y.numel(), 0.f, ctx.stream());
      else
        launch_unary(UnaryOp::Scale, Elem::F32, y.raw(), y.raw(), y.numel(), beta, 0.f,
                     ctx.stream());
      return check_launch("elementwise kernel");
    }
    cusparseHandle_t h = sparse(ctx, y);
    const SparseMat ad(a);
    const DenseMat bd(b.dim(0), b.dim(1), b.raw()), yd(y.dim(0), y.dim(1), y.raw());
    const auto op = CUSPARSE_OPERATION_NON_TRANSPOSE;
    size_t bytes = 0;
    VOLT_CUDA_CALL(cusparseSpMM_bufferSize(h, op, op, &alpha_, ad.d, bd.d, &beta, yd.d, CUDA_R_32F,
                                           CUSPARSE_SPMM_ALG_DEFAULT, &bytes));
    // The buffer's size depends on the non-zeros, known only now: from the stream-ordered pool.
    void* buffer = nullptr;
    if (bytes) VOLT_CUDA_CALL(cudaMallocAsync(&buffer, bytes, stream_of(ctx)));
    const cusparseStatus_t status = cusparseSpMM(h, op, op, &alpha_, ad.d, bd.d, &beta, yd.d,
                                                 CUDA_R_32F, CUSPARSE_SPMM_ALG_DEFAULT, buffer);
    if (buffer) (void)cudaFreeAsync(buffer, stream_of(ctx));
    check(status, "cusparseSpMM");
  }

 private:
  bool gemm_;
  float alpha_, beta_;
  bool trans_a_, trans_b_;
};

KernelDef sparse_kernel(const char* op, int since) {
  KernelDef def = cuda_kernel(op, since, make_kernel<SparseMatMul>);
  def.types = {DType::Float};
  def.priority = 100;
  def.csr_input0 = true;
  return def;
}

}  // namespace

VOLT_REGISTER_KERNEL(cuda_sparse_matmul, sparse_kernel("MatMul", 1));
VOLT_REGISTER_KERNEL(cuda_sparse_gemm, sparse_kernel("Gemm", 7));

}  // namespace volt::cuda
