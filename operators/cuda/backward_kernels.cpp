// The backward kernels training graphs run most (domain ai.volt; the CPU versions and their
// semantics are in operators/cpu/backward.cpp and backward_nn.cpp): elementwise derivatives, the
// broadcasting reduction behind bias gradients, MatMul's gradient for whole-batch operands,
// Softmax's and LayerNormalization's gradients, fills and scales.
// Shapes these kernels do not cover are declined at planning, and the node runs on the host.
#include "operators/common/shape_util.hpp"
#include "operators/cuda/cuda_kernel.hpp"
#include "operators/cuda/gemm.hpp"

namespace volt::cuda {
namespace {

void copy_device(const RunContext& ctx, Tensor& to, const Tensor& from) {
  if (from.nbytes())
    VOLT_CUDA_CALL(cudaMemcpyAsync(to.raw(), from.raw(), from.nbytes(), cudaMemcpyDeviceToDevice,
                                   stream_of(ctx)));
}

// dx = dy * f'(x, y).
class EltwiseGrad final : public Kernel {
 public:
  explicit EltwiseGrad(const Node& n) : fn_(grad_fn_of(n)), alpha_(grad_fn_alpha(n, fn_)) {}
  void infer(InferContext& ctx) const override {
    for (size_t i : {size_t{1}, size_t{2}})
      if (ctx.dtype(i) != ctx.dtype(0) || numel_of(ctx.shape(i)) != numel_of(ctx.shape(0)))
        ctx.input_error("x and y must match the gradient's dtype and size");
    ctx.set_output(0, ctx.dtype(0), ctx.shape(0));
  }
  void run(RunContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    launch_eltwise_grad(fn_, elem_of(dy.dtype(), ctx), ctx.output(0).raw(), dy.raw(),
                        ctx.input(1).raw(), ctx.input(2).raw(), dy.numel(), alpha_, ctx.stream());
    check_launch("eltwise_grad_kernel");
  }

 private:
  GradFn fn_;
  float alpha_;
};

// The gradient summed down to a shape it was broadcast from (input 1, read on the host).
class SumToShape final : public Kernel {
 public:
  explicit SumToShape(const Node&) {}
  void infer(InferContext& ctx) const override {
    const Tensor* s = ctx.input_tensor(1);
    if (!s) return ctx.set_output_unknown(0, ctx.dtype(0));
    const Shape to = to_int64_vector(*s, ctx.node(), "shape"), &from = ctx.shape(0);
    if (from.size() > static_cast<size_t>(kMaxRank))
      throw KernelUnsupported{"CUDA reductions take up to 8 dims"};
    bool fits = to.size() <= from.size();
    for (size_t i = 0; fits && i < to.size(); ++i) {
      const int64_t t = to[to.size() - 1 - i], f = from[from.size() - 1 - i];
      fits = t == f || t == 1;
    }
    if (!fits) ctx.input_error("cannot sum " + shape_str(from) + " to " + shape_str(to));
    ctx.set_output(0, ctx.dtype(0), to);
  }
  void run(RunContext& ctx) const override {
    const Tensor& g = ctx.input(0);
    Tensor& out = ctx.output(0);
    if (g.numel() == out.numel()) return copy_device(ctx, out, g);
    // `to` aligned to the right of `from`: axes where it is 1 (or absent) and `from` is not are
    // reduced; the kept ones are in order, so the output is laid out as `to` is.
    const Shape& from = g.shape();
    const size_t pad = from.size() - out.rank();
    std::vector<char> reduced(from.size());
    for (size_t d = 0; d < from.size(); ++d)
      reduced[d] = (d < pad || out.dim(d - pad) == 1) && from[d] != 1;
    int64_t n_reduced = 1;
    const ReduceGeometry geo = reduce_geometry(from, reduced, n_reduced);
    launch_reduce(ReduceOp::Sum, elem_of(g.dtype(), ctx), out.raw(), g.raw(), out.numel(),
                  n_reduced, geo, ctx.stream());
    check_launch("reduce_kernel");
  }
};

// MatMul's gradient (inputs dY, A, B; wrt 0: dA = dY B^T, wrt 1: dB = A^T dY) where each
// operand's batch is everything or one matrix. A broadcast B (the weight of a batched layer)
// gets its gradient from one product over the flattened batch; a broadcast A (rare) is left
// to the host kernel.
class MatMulGrad final : public Kernel {
 public:
  explicit MatMulGrad(const Node& n) : wrt_(n.attr_int("wrt", 0)) {}
  void infer(InferContext& ctx) const override {
    const Shape &a = ctx.shape(1), &b = ctx.shape(2);
    if (a.size() < 2 || b.size() < 2)
      throw KernelUnsupported{"CUDA MatMulGrad takes operands of rank 2 or more"};
    if (ctx.dtype(1) != ctx.dtype(0) || ctx.dtype(2) != ctx.dtype(0))
      ctx.input_error("operands differ in dtype");
    const Geometry g = geometry(a, b);
    if (g.m * g.n * g.batch != numel_of(ctx.shape(0)) || a.back() != b[b.size() - 2])
      ctx.input_error("the gradient does not match the product of " + shape_str(a) + " and " +
                      shape_str(b));
    if ((g.batch_a != g.batch && g.batch_a != 1) || (g.batch_b != g.batch && g.batch_b != 1))
      throw KernelUnsupported{"CUDA MatMulGrad broadcasts whole batches only"};
    if (wrt_ == 0 && g.batch_a == 1 && g.batch > 1)
      throw KernelUnsupported{"CUDA MatMulGrad: A broadcast over the batch"};
    ctx.set_output(0, ctx.dtype(1 + wrt_), ctx.shape(1 + wrt_));
  }
  void run(RunContext& ctx) const override {
    const Tensor &dy = ctx.input(0), &a = ctx.input(1), &b = ctx.input(2);
    Tensor& out = ctx.output(0);
    const Geometry g = geometry(a.shape(), b.shape());
    if (out.numel() == 0) return;
    cublasHandle_t h = blas(ctx, out);
    const DType t = dy.dtype();
    if (g.m == 0 || g.n == 0 || g.batch == 0) {  // an empty sum
      launch_fill(elem_of(t, ctx), out.raw(), out.numel(), 0.f, ctx.stream());
      return check_launch("fill_kernel");
    }
    if (wrt_ == 0) {  // dA_i [m,k] = dY_i [m,n] B_i^T
      gemm(h, t, false, true, g.m, g.k, g.n, 1.f, dy.raw(), g.m * g.n, b.raw(),
           g.batch_b == 1 ? 0 : g.k * g.n, 0.f, out.raw(), g.m * g.k, g.batch);
    } else if (g.batch_b == 1) {  // dB [k,n] = sum_i A_i^T dY_i = A^T dY over batch*m rows
      gemm(h, t, true, false, g.k, g.n, g.m * g.batch, 1.f, a.raw(), 0, dy.raw(), 0, 0.f, out.raw(),
           0, 1);
    } else {  // dB_i [k,n] = A_i^T dY_i
      gemm(h, t, true, false, g.k, g.n, g.m, 1.f, a.raw(), g.batch_a == 1 ? 0 : g.m * g.k, dy.raw(),
           g.m * g.n, 0.f, out.raw(), g.k * g.n, g.batch);
    }
  }

 private:
  struct Geometry {
    int64_t m, k, n, batch, batch_a, batch_b;
  };
  static Geometry geometry(const Shape& a, const Shape& b) {
    Geometry g;
    g.m = a[a.size() - 2];
    g.k = a.back();
    g.n = b.back();
    g.batch_a = numel_of(Shape(a.begin(), a.end() - 2));
    g.batch_b = numel_of(Shape(b.begin(), b.end() - 2));
    g.batch = std::max(g.batch_a, g.batch_b);
    if (g.batch_a == 0 || g.batch_b == 0) g.batch = 0;
    return g;
  }
  int64_t wrt_;
};

// Softmax's (or LogSoftmax's) gradient from dY and Y, over the last axes (`coerced`: the
// opset < 13 form, everything from `axis` on as one); a softmax axis with axes after it is left to
// the host kernel.
class SoftmaxGrad final : public Kernel {
 public:
  explicit SoftmaxGrad(const Node& n)
      : axis_(n.attr_int("axis", -1)),
        log_(n.attr_int("log", 0) != 0),
        coerced_(n.attr_int("coerced", 0) != 0) {}
  void infer(InferContext& ctx) const override {
    const Shape& y = ctx.shape(1);
    if (ctx.shape(0) != y || ctx.dtype(0) != ctx.dtype(1))
      ctx.input_error("the gradient must match the softmax's output");
    if (!y.empty() && !coerced_ &&
        normalize_axis(axis_, static_cast<int64_t>(y.size()), ctx.node()) !=
            static_cast<int64_t>(y.size()) - 1)
      throw KernelUnsupported{"CUDA SoftmaxGrad: the last axis only"};
    ctx.set_output(0, ctx.dtype(0), ctx.shape(0));
  }
  void run(RunContext& ctx) const override {
    const Tensor &dy = ctx.input(0), &y = ctx.input(1);
    const int64_t r = static_cast<int64_t>(y.rank());
    int64_t cols = r ? y.dim(y.rank() - 1) : 1;
    if (coerced_ && r) {
      cols = 1;
      for (int64_t d = normalize_axis(axis_, r, ctx.node(), true); d < r; ++d)
        cols *= y.dim(static_cast<size_t>(d));
    }
    const int64_t rows = cols ? y.numel() / cols : 0;
    launch_softmax_grad(elem_of(dy.dtype(), ctx), ctx.output(0).raw(), dy.raw(), y.raw(), rows,
                        cols, log_, ctx.stream());
    check_launch("softmax_grad_kernel");
  }

 private:
  int64_t axis_;
  bool log_, coerced_;
};

// LayerNormalization's gradient (inputs dY, X, scale; outputs dX, dscale, dbias) with a scale of
// one value per normalized element.
class LayerNormGrad final : public Kernel {
 public:
  explicit LayerNormGrad(const Node& n)
      : axis_(n.attr_int("axis", -1)), epsilon_(n.attr_float("epsilon", 1e-5f)) {}
  void infer(InferContext& ctx) const override {
    const Shape& x = ctx.shape(1);
    if (ctx.shape(0) != x || ctx.dtype(0) != ctx.dtype(1)) ctx.input_error("dY must match X");
    const Geometry g = geometry(x, ctx.node());
    if (numel_of(ctx.shape(2)) != g.cols)
      throw KernelUnsupported{"CUDA LayerNormGrad: a scale per normalized element"};
    if (ctx.dtype(2) != DType::Float && ctx.dtype(2) != DType::Float16)
      throw KernelUnsupported{"CUDA LayerNormGrad: an fp32 or fp16 scale"};
    ctx.set_output(0, ctx.dtype(1), x);
    ctx.set_output(1, ctx.dtype(2), ctx.shape(2));
    if (ctx.output_count() > 2) ctx.set_output(2, ctx.dtype(2), ctx.shape(2));
    ctx.request_scratch(2 * static_cast<size_t>(g.rows) * sizeof(float));
  }
  void run(RunContext& ctx) const override {
    const Tensor &dy = ctx.input(0), &x = ctx.input(1), &scale = ctx.input(2);
    const Geometry g = geometry(x.shape(), ctx.node());
    launch_layer_norm_grad(elem_of(x.dtype(), ctx), elem_of(scale.dtype(), ctx),
                           ctx.output(0).raw(), ctx.has_output(1) ? ctx.output(1).raw() : nullptr,
                           ctx.has_output(2) ? ctx.output(2).raw() : nullptr,
                           static_cast<float*>(ctx.scratch()), dy.raw(), x.raw(), scale.raw(),
                           g.rows, g.cols, epsilon_, ctx.stream());
    check_launch("layer_norm_grad kernels");
  }

 private:
  struct Geometry {
    int64_t rows = 1, cols = 1;
  };
  Geometry geometry(const Shape& x, const Node& node) const {
    Geometry g;
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(x.size()), node);
    for (int64_t d = 0; d < static_cast<int64_t>(x.size()); ++d)
      (d < axis ? g.rows : g.cols) *= x[static_cast<size_t>(d)];
    return g;
  }
  int64_t axis_;
  float epsilon_;
};

class FillLike final : public Kernel {
 public:
  FillLike(const Node&, float value) : value_(value) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.dtype(0), ctx.shape(0)); }
  void run(RunContext& ctx) const override {
    Tensor& out = ctx.output(0);
    launch_fill(elem_of(out.dtype(), ctx), out.raw(), out.numel(), value_, ctx.stream());
    check_launch("fill_kernel");
  }

 private:
  float value_;
};

class Scale final : public Kernel {
 public:
  explicit Scale(const Node& n) : scale_(n.attr_float("scale", 1.0f)) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.dtype(0), ctx.shape(0)); }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    launch_unary(UnaryOp::Scale, elem_of(x.dtype(), ctx), ctx.output(0).raw(), x.raw(), x.numel(),
                 scale_, 0.f, ctx.stream());
    check_launch("unary_kernel");
  }

 private:
  float scale_;
};

}  // namespace

VOLT_REGISTER_KERNEL(cuda_eltwise_grad, cuda_volt_kernel("EltwiseGrad", make_kernel<EltwiseGrad>));
VOLT_REGISTER_KERNEL(cuda_sum_to_shape,
                     cuda_volt_kernel("SumToShape", make_kernel<SumToShape>, {1}));
VOLT_REGISTER_KERNEL(cuda_matmul_grad, cuda_volt_kernel("MatMulGrad", make_kernel<MatMulGrad>));
VOLT_REGISTER_KERNEL(cuda_zeros_like, cuda_volt_kernel("ZerosLike", [](const Node& n) {
                       return std::make_unique<FillLike>(n, 0.f);
                     }));
VOLT_REGISTER_KERNEL(cuda_ones_like, cuda_volt_kernel("OnesLike", [](const Node& n) {
                       return std::make_unique<FillLike>(n, 1.f);
                     }));
VOLT_REGISTER_KERNEL(cuda_scale, cuda_volt_kernel("Scale", make_kernel<Scale>));
VOLT_REGISTER_KERNEL(cuda_softmax_grad, cuda_volt_kernel("SoftmaxGrad", make_kernel<SoftmaxGrad>));
VOLT_REGISTER_KERNEL(cuda_layer_norm_grad,
                     cuda_volt_kernel("LayerNormGrad", make_kernel<LayerNormGrad>));

}  // namespace volt::cuda
