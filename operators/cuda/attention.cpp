// ai.volt Attention (runtime/passes/fuse_attention.cpp) on the device: scores = scale Q Kᵀ as one
// strided-batched cuBLAS product (fp16 on tensor cores, fp32 accumulation) into the step's
// scratch, the mask added and the softmax taken in place by one kernel (fp32 arithmetic), then
// the scores times V as a second batched product. Q, K and V must share their batch axes (no
// broadcasting between them); other shapes are declined and run on the host.
#include "operators/common/attention_shapes.hpp"
#include "operators/cuda/cuda_kernel.hpp"
#include "operators/cuda/gemm.hpp"

namespace volt::cuda {
namespace {

class Attention final : public Kernel {
 public:
  explicit Attention(const Node& n) : attrs_(n) {}
  void infer(InferContext& ctx) const override {
    const AttentionShapes a = attrs_.infer(ctx);
    for (size_t i = 0; i < 3; ++i)
      if (leading(ctx.shape(i)) != a.batch)
        throw KernelUnsupported{"CUDA Attention: Q, K and V with the same batch axes"};
    if (a.scores.size() > static_cast<size_t>(kMaxRank))
      throw KernelUnsupported{"CUDA Attention: up to 8 axes"};
    const size_t element = ctx.dtype(0) == DType::Float16 ? 2 : 4;
    ctx.request_scratch(static_cast<size_t>(numel_of(a.scores)) * element);
    ctx.set_output(0, ctx.dtype(0), a.out);
  }
  void run(RunContext& ctx) const override {
    const Tensor &q = ctx.input(0), &k = ctx.input(1), &v = ctx.input(2);
    const Tensor* mask = ctx.has_input(3) ? &ctx.input(3) : nullptr;
    const AttentionShapes a = attrs_.of(ctx);
    Tensor& y = ctx.output(0);
    const int64_t batch = numel_of(a.batch);
    if (!y.numel()) return;
    if (a.s_kv == 0) {  // nothing to attend to: a softmax over no keys, and zero sums
      launch_fill(elem_of(y.dtype(), ctx), y.raw(), y.numel(), 0.f, ctx.stream());
      return check_launch("fill_kernel");
    }
    cublasHandle_t h = blas(ctx, y);
    const DType t = q.dtype();
    void* scores = ctx.scratch();
    gemm(h, t, false, !attrs_.k_transposed, a.s, a.s_kv, a.d, attrs_.scale, q.raw(), a.s * a.d,
         k.raw(), a.s_kv * a.d, 0.f, scores, a.s * a.s_kv, batch);
    Broadcast rows;
    int64_t col_stride = 0;
    if (mask) {
      const auto strides = broadcast_strides(mask->shape(), a.scores);
      rows.rank = static_cast<int>(a.scores.size()) - 1;
      for (int d = 0; d < rows.rank; ++d) {
        rows.dims[d] = a.scores[static_cast<size_t>(d)];
        rows.a_strides[d] = strides[static_cast<size_t>(d)];
      }
      col_stride = strides.back();
    }
    launch_attention_softmax(elem_of(t, ctx), scores, mask ? mask->raw() : nullptr, batch * a.s,
                             a.s_kv, rows, col_stride, ctx.stream());
    check_launch("attention_softmax_kernel");
    gemm(h, t, false, false, a.s, a.dv, a.s_kv, 1.f, scores, a.s * a.s_kv, v.raw(), a.s_kv * a.dv,
         0.f, y.raw(), a.s * a.dv, batch);
  }

 private:
  AttentionAttributes attrs_;
};

}  // namespace

VOLT_REGISTER_KERNEL(cuda_attention, cuda_volt_kernel("Attention", make_kernel<Attention>));

}  // namespace volt::cuda
