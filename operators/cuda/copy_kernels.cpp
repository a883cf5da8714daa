// Ops that copy elements to new places on the device: Expand (a broadcast), Slice (a strided
// window). Their index inputs — Expand's shape,
// Slice's starts, ends, axes and steps — are host inputs; the shapes follow the CPU kernels.
#include "operators/common/shape_util.hpp"
#include "operators/common/slice_window.hpp"
#include "operators/cuda/cuda_kernel.hpp"

namespace volt::cuda {
namespace {

void check_rank(const Shape& s, const char* op) {
  if (s.size() > static_cast<size_t>(kMaxRank))
    throw KernelUnsupported{std::string("CUDA ") + op + " takes up to 8 dims"};
}

// out[i] = base[Σ idx_d · strides[d]] over out_shape's multi-index (strides may be 0 or negative).
void strided_copy(RunContext& ctx, const Tensor& x, const void* base, const Shape& out_shape,
                  const std::vector<int64_t>& strides, void* out) {
  launch_permute(static_cast<int>(dtype_size(x.dtype())), out, base, numel_of(out_shape),
                 static_cast<int>(out_shape.size()), out_shape.data(), strides.data(),
                 ctx.stream());
  check_launch("permute_kernel");
}

class Expand final : public Kernel {
 public:
  explicit Expand(const Node&) {}
  void infer(InferContext& ctx) const override {
    const Tensor* s = ctx.input_tensor(1);
    if (!s) return ctx.set_output_unknown(0, ctx.dtype(0));
    Shape out =
        broadcast_shapes({ctx.shape(0), to_int64_vector(*s, ctx.node(), "shape")}, ctx.node());
    check_rank(out, "Expand");
    ctx.set_output(0, ctx.dtype(0), std::move(out));
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (y.rank() > static_cast<size_t>(kMaxRank)) ctx.error("rank above 8 on CUDA");
    strided_copy(ctx, x, x.raw(), y.shape(), broadcast_strides(x.shape(), y.shape()), y.raw());
  }
};

class Slice final : public Kernel {
 public:
  explicit Slice(const Node& n) : params_(n) {}
  void infer(InferContext& ctx) const override {
    check_rank(ctx.shape(0), "Slice");
    const auto w = params_.window(ctx);
    if (!w) return ctx.set_output_unknown(0, ctx.dtype(0));
    ctx.set_output(0, ctx.dtype(0), w->out);
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    for (size_t i = 1; i < 5; ++i)
      if (ctx.has_input(i) && !ctx.input(i).device().is_cpu())
        ctx.error("slice indices must be on the host");
    const SliceWindow w = params_.window(ctx);
    if (!y.numel()) return;
    const auto strides = strides_of(x.shape());
    std::vector<int64_t> window_strides(x.rank());
    int64_t first = 0;  // the element at the window's origin
    for (size_t d = 0; d < x.rank(); ++d) {
      first += w.start[d] * strides[d];
      window_strides[d] = w.step[d] * strides[d];
    }
    strided_copy(ctx, x, static_cast<const char*>(x.raw()) + first * dtype_size(x.dtype()),
                 y.shape(), window_strides, y.raw());
  }

 private:
  SliceParameters params_;
};

}  // namespace

VOLT_REGISTER_KERNEL(cuda_expand, cuda_kernel("Expand", 8, make_kernel<Expand>, {1}));
VOLT_REGISTER_KERNEL(cuda_slice, cuda_kernel("Slice", 1, make_kernel<Slice>, {1, 2, 3, 4}));

}  // namespace volt::cuda
