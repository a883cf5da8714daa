// CUDA kernels of the elementwise family and its neighbours: binary ops and Where with
// broadcasting, unary activations, Cast between fp32 and fp16, Softmax/LogSoftmax,
// LayerNormalization, Transpose, Concat. Shapes follow the same rules as the CPU kernels
// (operators/common/shape_util).
#include <cstring>

#include "operators/common/shape_util.hpp"
#include "operators/cuda/cuda_kernel.hpp"

namespace volt::cuda {
namespace {

// The strides of `a`, `b` (and Where's condition `c`) broadcast to `out`.
Broadcast broadcast_of(const Shape& a, const Shape& b, const Shape& out, const RunContext& ctx,
                       const Shape* c = nullptr) {
  if (out.size() > static_cast<size_t>(kMaxRank))
    ctx.error("has rank " + std::to_string(out.size()) + "; the CUDA kernels take at most 8");
  Broadcast s;
  s.rank = static_cast<int>(out.size());
  const auto sa = broadcast_strides(a, out), sb = broadcast_strides(b, out);
  const auto sc = c ? broadcast_strides(*c, out) : std::vector<int64_t>(out.size(), 0);
  for (size_t d = 0; d < out.size(); ++d) {
    s.dims[d] = out[d];
    s.a_strides[d] = sa[d];
    s.b_strides[d] = sb[d];
    s.c_strides[d] = sc[d];
  }
  return s;
}

class Binary final : public Kernel {
 public:
  Binary(const Node&, BinaryOp op) : op_(op) {}
  void infer(InferContext& ctx) const override {
    // (Pow's integer exponents of float bases, the one mix ONNX allows, run on the host.)
    if (ctx.dtype(0) != ctx.dtype(1))
      throw KernelUnsupported{"CUDA binary ops take operands of one dtype"};
    Shape out = broadcast_shapes({ctx.shape(0), ctx.shape(1)}, ctx.node());
    if (out.size() > static_cast<size_t>(kMaxRank))
      throw KernelUnsupported{"CUDA elementwise kernels take up to 8 dims"};
    ctx.set_output(0, ctx.dtype(0), std::move(out));
  }
  void run(RunContext& ctx) const override {
    const Tensor &a = ctx.input(0), &b = ctx.input(1);
    Tensor& y = ctx.output(0);
    launch_binary(op_, elem_of(a.dtype(), ctx), y.raw(), a.raw(), b.raw(), y.numel(),
                  broadcast_of(a.shape(), b.shape(), y.shape(), ctx), ctx.stream());
    check_launch("binary_kernel");
  }

 private:
  BinaryOp op_;
};

// Where: the binary family's broadcast with a third operand, the condition.
class Where final : public Kernel {
 public:
  explicit Where(const Node&) {}
  void infer(InferContext& ctx) const override {
    if (ctx.dtype(0) != DType::Bool) ctx.input_error("condition must be bool");
    Shape out = broadcast_shapes({ctx.shape(0), ctx.shape(1), ctx.shape(2)}, ctx.node());
    if (out.size() > static_cast<size_t>(kMaxRank))
      throw KernelUnsupported{"CUDA elementwise kernels take up to 8 dims"};
    ctx.set_output(0, ctx.dtype(1), std::move(out));
  }
  void run(RunContext& ctx) const override {
    const Tensor &c = ctx.input(0), &a = ctx.input(1), &b = ctx.input(2);
    Tensor& y = ctx.output(0);
    launch_where(elem_of(a.dtype(), ctx), y.raw(), c.data<bool>(), a.raw(), b.raw(), y.numel(),
                 broadcast_of(a.shape(), b.shape(), y.shape(), ctx, &c.shape()), ctx.stream());
    check_launch("where_kernel");
  }
};

class Unary final : public Kernel {
 public:
  Unary(const Node& n, UnaryOp op, float alpha, float beta)
      : op_(op), alpha_(n.attr_float("alpha", alpha)), beta_(n.attr_float("beta", beta)) {
    if (op == UnaryOp::Gelu && n.attr_string("approximate", "none") == "tanh")
      op_ = UnaryOp::GeluTanh;
    if (op == UnaryOp::Clip && n.opset < 11) {
      alpha_ = n.attr_float("min", -3.402823466e38f);
      beta_ = n.attr_float("max", 3.402823466e38f);
    }
  }
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.dtype(0), ctx.shape(0)); }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    float lo = alpha_, hi = beta_;
    if (op_ == UnaryOp::Clip && ctx.node().opset >= 11) {  // bounds are host inputs 1 and 2
      lo = ctx.has_input(1) ? bound(ctx.input(1), ctx) : -3.402823466e38f;
      hi = ctx.has_input(2) ? bound(ctx.input(2), ctx) : 3.402823466e38f;
    }
    launch_unary(op_, elem_of(x.dtype(), ctx), ctx.output(0).raw(), x.raw(), x.numel(), lo, hi,
                 ctx.stream());
    check_launch("unary_kernel");
  }

 private:
  static float bound(const Tensor& t, const RunContext& ctx) {
    if (t.numel() != 1 || !t.device().is_cpu()) ctx.error("Clip bounds must be host scalars");
    return t.dtype() == DType::Float ? t.data<float>()[0]
                                     : static_cast<float>(t.data<Float16>()[0]);
  }
  UnaryOp op_;
  float alpha_, beta_;
};

class Cast final : public Kernel {
 public:
  explicit Cast(const Node& n) : to_(static_cast<DType>(n.attr_int("to"))) {}
  void infer(InferContext& ctx) const override {
    if (to_ != DType::Float && to_ != DType::Float16)
      throw KernelUnsupported{"CUDA Cast only converts between float32 and float16"};
    ctx.set_output(0, to_, ctx.shape(0));
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    launch_cast(elem_of(to_, ctx), ctx.output(0).raw(), elem_of(x.dtype(), ctx), x.raw(), x.numel(),
                ctx.stream());
    check_launch("cast_kernel");
  }

 private:
  DType to_;
};

// Softmax over rows of the flattened [outer, inner] view: opset < 13 flattens at `axis`; from
// 13 the axis alone is normalized, which is the same view when it is the last axis.
// The [rows, cols] view of x that normalizes over the axes from `axis` on.
std::pair<int64_t, int64_t> rows_and_columns(const Tensor& x, int64_t axis_attr, const Node& node) {
  const int64_t axis = normalize_axis(axis_attr, static_cast<int64_t>(x.rank()), node);
  int64_t rows = 1;
  for (int64_t d = 0; d < axis; ++d) rows *= x.dim(static_cast<size_t>(d));
  return {rows, rows ? x.numel() / rows : 0};
}

class Softmax final : public Kernel {
 public:
  Softmax(const Node& n, bool log) : log_(log), axis_(n.attr_int("axis", n.opset >= 13 ? -1 : 1)) {}
  void infer(InferContext& ctx) const override {
    const int64_t rank = static_cast<int64_t>(ctx.shape(0).size());
    const int64_t axis = normalize_axis(axis_, rank, ctx.node());
    if (ctx.node().opset >= 13 && axis != rank - 1)
      throw KernelUnsupported{"CUDA Softmax normalizes the last axis only"};
    ctx.set_output(0, ctx.dtype(0), ctx.shape(0));
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const auto [rows, cols] = rows_and_columns(x, axis_, ctx.node());
    launch_softmax(elem_of(x.dtype(), ctx), ctx.output(0).raw(), x.raw(), rows, cols, log_,
                   ctx.stream());
    check_launch("softmax_kernel");
  }

 private:
  bool log_;
  int64_t axis_;
};

class LayerNorm final : public Kernel {
 public:
  explicit LayerNorm(const Node& n)
      : axis_(n.attr_int("axis", -1)), epsilon_(n.attr_float("epsilon", 1e-5f)) {}
  void infer(InferContext& ctx) const override {
    const int64_t rank = static_cast<int64_t>(ctx.shape(0).size());
    const int64_t axis = normalize_axis(axis_, rank, ctx.node());
    const int64_t cols = numel_of(Shape(ctx.shape(0).begin() + axis, ctx.shape(0).end()));
    if (numel_of(ctx.shape(1)) != cols || (ctx.has_input(2) && numel_of(ctx.shape(2)) != cols))
      throw KernelUnsupported{"CUDA LayerNormalization takes full-size scale and bias"};
    if (ctx.dtype(1) != ctx.dtype(0) || (ctx.has_input(2) && ctx.dtype(2) != ctx.dtype(0)))
      throw KernelUnsupported{"CUDA LayerNormalization takes scale and bias of X's dtype"};
    if (ctx.output_count() > 1 && (ctx.node().has_output(1) || ctx.node().has_output(2)))
      throw KernelUnsupported{"CUDA LayerNormalization does not output mean and inv_std_dev"};
    ctx.set_output(0, ctx.dtype(0), ctx.shape(0));
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const auto [rows, cols] = rows_and_columns(x, axis_, ctx.node());
    launch_layer_norm(elem_of(x.dtype(), ctx), ctx.output(0).raw(), x.raw(), ctx.input(1).raw(),
                      ctx.has_input(2) ? ctx.input(2).raw() : nullptr, rows, cols, epsilon_,
                      ctx.stream());
    check_launch("layer_norm_kernel");
  }

 private:
  int64_t axis_;
  float epsilon_;
};

class Transpose final : public Kernel {
 public:
  explicit Transpose(const Node& n) : perm_(n.attr_ints("perm")) {}
  void infer(InferContext& ctx) const override {
    const Shape& x = ctx.shape(0);
    if (x.size() > static_cast<size_t>(kMaxRank))
      throw KernelUnsupported{"CUDA Transpose takes up to 8 dims"};
    const auto perm = permutation(x.size(), ctx.node());
    Shape out(x.size());
    for (size_t d = 0; d < x.size(); ++d) out[d] = x[static_cast<size_t>(perm[d])];
    ctx.set_output(0, ctx.dtype(0), out);
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (x.rank() > static_cast<size_t>(kMaxRank)) ctx.error("rank above 8 on CUDA");
    const auto perm = permutation(x.rank(), ctx.node());
    const auto strides = strides_of(x.shape());
    int64_t in_strides[kMaxRank];
    for (size_t d = 0; d < x.rank(); ++d) in_strides[d] = strides[static_cast<size_t>(perm[d])];
    launch_permute(static_cast<int>(dtype_size(x.dtype())), y.raw(), x.raw(), y.numel(),
                   static_cast<int>(x.rank()), y.shape().data(), in_strides, ctx.stream());
    check_launch("permute_kernel");
  }

 private:
  std::vector<int64_t> permutation(size_t rank, const Node& node) const {
    std::vector<int64_t> p = perm_;
    if (p.empty())
      for (size_t d = 0; d < rank; ++d) p.push_back(static_cast<int64_t>(rank - 1 - d));
    std::vector<char> seen(rank, 0);
    VOLT_CHECK(p.size() == rank, InvalidModel, node.describe() + ": perm has the wrong length");
    for (int64_t v : p) {
      VOLT_CHECK(v >= 0 && v < static_cast<int64_t>(rank) && !seen[static_cast<size_t>(v)],
                 InvalidModel, node.describe() + ": perm is not a permutation");
      seen[static_cast<size_t>(v)] = 1;
    }
    return p;
  }
  std::vector<int64_t> perm_;
};

// Concat: each input is `outer` rows of its own row length; one 2-D copy per input.
class Concat final : public Kernel {
 public:
  explicit Concat(const Node& n) : axis_(n.attr_int("axis")) {}
  void infer(InferContext& ctx) const override {
    Shape out = ctx.shape(0);
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(out.size()), ctx.node());
    for (size_t i = 1; i < ctx.input_count(); ++i) {
      const Shape& s = ctx.shape(i);
      if (s.size() != out.size() || ctx.dtype(i) != ctx.dtype(0)) ctx.input_error("inputs differ");
      for (size_t d = 0; d < s.size(); ++d)
        if (static_cast<int64_t>(d) != axis && s[d] != out[d]) ctx.input_error("shapes differ");
      out[static_cast<size_t>(axis)] += s[static_cast<size_t>(axis)];
    }
    ctx.set_output(0, ctx.dtype(0), out);
  }
  void run(RunContext& ctx) const override {
    Tensor& y = ctx.output(0);
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(y.rank()), ctx.node());
    int64_t outer = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= y.dim(static_cast<size_t>(d));
    const size_t es = dtype_size(y.dtype());
    const size_t out_row = outer ? y.nbytes() / static_cast<size_t>(outer) : 0;
    size_t offset = 0;
    for (size_t i = 0; i < ctx.input_count(); ++i) {
      const Tensor& x = ctx.input(i);
      const size_t row = outer ? x.nbytes() / static_cast<size_t>(outer) : 0;
      if (row && outer)
        VOLT_CUDA_CALL(cudaMemcpy2DAsync(static_cast<char*>(y.raw()) + offset, out_row, x.raw(),
                                         row, row, static_cast<size_t>(outer),
                                         cudaMemcpyDeviceToDevice, stream_of(ctx)));
      offset += row;
    }
    (void)es;
  }

 private:
  int64_t axis_;
};

std::function<std::unique_ptr<Kernel>(const Node&)> binary(BinaryOp op) {
  return [op](const Node& n) { return std::make_unique<Binary>(n, op); };
}
std::function<std::unique_ptr<Kernel>(const Node&)> unary(UnaryOp op, float alpha = 0,
                                                          float beta = 0) {
  return [=](const Node& n) { return std::make_unique<Unary>(n, op, alpha, beta); };
}

}  // namespace

VOLT_REGISTER_KERNEL(cuda_add, cuda_kernel("Add", 7, binary(BinaryOp::Add)));
VOLT_REGISTER_KERNEL(cuda_sub, cuda_kernel("Sub", 7, binary(BinaryOp::Sub)));
VOLT_REGISTER_KERNEL(cuda_mul, cuda_kernel("Mul", 7, binary(BinaryOp::Mul)));
VOLT_REGISTER_KERNEL(cuda_div, cuda_kernel("Div", 7, binary(BinaryOp::Div)));
VOLT_REGISTER_KERNEL(cuda_pow, cuda_kernel("Pow", 7, binary(BinaryOp::Pow)));
VOLT_REGISTER_KERNEL(cuda_where, {.op = "Where",
                                  .since = 9,
                                  .device = "cuda",
                                  .types = kCudaFloatTypes,
                                  .type_input = 1,
                                  .create = make_kernel<Where>});
VOLT_REGISTER_KERNEL(cuda_relu, cuda_kernel("Relu", 6, unary(UnaryOp::Relu)));
VOLT_REGISTER_KERNEL(cuda_leaky_relu,
                     cuda_kernel("LeakyRelu", 6, unary(UnaryOp::LeakyRelu, 0.01f)));
VOLT_REGISTER_KERNEL(cuda_sigmoid, cuda_kernel("Sigmoid", 6, unary(UnaryOp::Sigmoid)));
VOLT_REGISTER_KERNEL(cuda_tanh, cuda_kernel("Tanh", 6, unary(UnaryOp::Tanh)));
VOLT_REGISTER_KERNEL(cuda_exp, cuda_kernel("Exp", 6, unary(UnaryOp::Exp)));
VOLT_REGISTER_KERNEL(cuda_log, cuda_kernel("Log", 6, unary(UnaryOp::Log)));
VOLT_REGISTER_KERNEL(cuda_sqrt, cuda_kernel("Sqrt", 6, unary(UnaryOp::Sqrt)));
VOLT_REGISTER_KERNEL(cuda_neg, cuda_kernel("Neg", 6, unary(UnaryOp::Neg)));
VOLT_REGISTER_KERNEL(cuda_abs, cuda_kernel("Abs", 6, unary(UnaryOp::Abs)));
VOLT_REGISTER_KERNEL(cuda_erf, cuda_kernel("Erf", 9, unary(UnaryOp::Erf)));
VOLT_REGISTER_KERNEL(cuda_gelu, cuda_kernel("Gelu", 20, unary(UnaryOp::Gelu)));
VOLT_REGISTER_KERNEL(cuda_softplus, cuda_kernel("Softplus", 1, unary(UnaryOp::Softplus)));
VOLT_REGISTER_KERNEL(cuda_hard_sigmoid,
                     cuda_kernel("HardSigmoid", 6, unary(UnaryOp::HardSigmoid, 0.2f, 0.5f)));
VOLT_REGISTER_KERNEL(cuda_clip, cuda_kernel("Clip", 6, unary(UnaryOp::Clip), {1, 2}));
VOLT_REGISTER_KERNEL(cuda_cast, cuda_kernel("Cast", 6, make_kernel<Cast>));
VOLT_REGISTER_KERNEL(cuda_softmax, cuda_kernel("Softmax", 1, [](const Node& n) {
                       return std::make_unique<Softmax>(n, false);
                     }));
VOLT_REGISTER_KERNEL(cuda_log_softmax, cuda_kernel("LogSoftmax", 1, [](const Node& n) {
                       return std::make_unique<Softmax>(n, true);
                     }));
VOLT_REGISTER_KERNEL(cuda_layer_norm,
                     cuda_kernel("LayerNormalization", 17, make_kernel<LayerNorm>));
VOLT_REGISTER_KERNEL(cuda_transpose, cuda_kernel("Transpose", 1, make_kernel<Transpose>));
VOLT_REGISTER_KERNEL(cuda_concat, cuda_kernel("Concat", 4, make_kernel<Concat>));

}  // namespace volt::cuda
