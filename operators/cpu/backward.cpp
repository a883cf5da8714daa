// volt's own backward kernels (domain "ai.volt"), emitted by the gradient rules in
// operators/grad/: broadcasting reductions, elementwise derivatives, matmul, gather, reduction,
// softmax and loss gradients. Reference loops computed in double (precision over speed, for now).
#include <cmath>
#include <map>

#include "operators/common/dispatch.hpp"
#include "operators/common/grad_fn.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/common/simd_clones.hpp"
#include "operators/common/tensor_values.hpp"
#include "operators/grad/gradient_rule.hpp"
#include "operators/registry.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

// Sums `v` (shaped `from`) down to `to` by numpy's broadcasting rules.
std::vector<double> sum_to_shape(const std::vector<double>& v, const Shape& from, const Shape& to,
                                 const Node& node) {
  VOLT_CHECK(to.size() <= from.size(), InvalidArgument,
             node.describe() + ": cannot sum " + shape_str(from) + " to " + shape_str(to));
  for (size_t i = 0; i < to.size(); ++i) {
    const int64_t t = to[to.size() - 1 - i], f = from[from.size() - 1 - i];
    VOLT_CHECK(t == f || t == 1, InvalidArgument,
               node.describe() + ": cannot sum " + shape_str(from) + " to " + shape_str(to));
  }
  std::vector<double> out(static_cast<size_t>(numel_of(to)), 0.0);
  if (from == to) return v;
  BroadcastIterator(from, {broadcast_strides(to, from)})
      .for_each([&, e = size_t{0}](const int64_t* off) mutable { out[off[0]] += v[e++]; });
  return out;
}

Shape shape_from(const Tensor& t, const Node& node) {
  return to_int64_vector(t, node, "shape");
}

// Output 0 is typed like input 0 and shaped by the values of input `shape_input`, when known.
void infer_shaped_by(InferContext& ctx, size_t shape_input) {
  const Tensor* s = ctx.input_tensor(shape_input);
  if (!s) return ctx.set_output_unknown(0, ctx.dtype(0));
  ctx.set_output(0, ctx.dtype(0), shape_from(*s, ctx.node()));
}

class SumToShape final : public Kernel {
 public:
  explicit SumToShape(const Node&) {}
  void infer(InferContext& ctx) const override { infer_shaped_by(ctx, 1); }
  void run(RunContext& ctx) const override {
    const Tensor& g = ctx.input(0);
    Tensor& out = ctx.output(0);
    if (g.shape() == out.shape()) {
      std::memcpy(out.raw(), g.raw(), g.nbytes());
      return;
    }
    // The bias case, [rows, n] summed to [n] (or [1, n]), in float without conversions.
    const int64_t n = out.numel();
    if (g.dtype() == DType::Float && g.rank() >= 1 && n == g.shape().back() &&
        out.shape().back() == n) {
      const float* pg = g.data<float>();
      float* po = out.data<float>();
      const int64_t rows = g.numel() / std::max<int64_t>(n, 1);
      std::fill(po, po + n, 0.0f);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < n; ++j) po[j] += pg[r * n + j];
      return;
    }
    from_doubles(out, sum_to_shape(to_doubles(g), g.shape(), out.shape(), ctx.node()));
  }
};

class Scale final : public Kernel {
 public:
  explicit Scale(const Node& n) : scale_(n.attr_float("scale", 1.0f)) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.dtype(0), ctx.shape(0)); }
  void run(RunContext& ctx) const override {
    auto v = to_doubles(ctx.input(0));
    for (double& x : v) x *= scale_;
    from_doubles(ctx.output(0), v);
  }

 private:
  float scale_;
};

class FillLike final : public Kernel {
 public:
  FillLike(const Node&, double value) : value_(value) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.dtype(0), ctx.shape(0)); }
  void run(RunContext& ctx) const override {
    from_doubles(ctx.output(0),
                 std::vector<double>(static_cast<size_t>(ctx.output(0).numel()), value_));
  }

 private:
  double value_;
};

// Calls f(tag) for a floating-point gradient type; anything else is an error naming the node.
template <class F>
void dispatch_gradient(const RunContext& ctx, DType type, F&& f) {
  dispatch_numeric(type, [&](auto tag) {
    if constexpr (!std::is_floating_point_v<typename Compute<typename decltype(tag)::type>::type>)
      ctx.error("needs floating-point gradients");
    else
      f(tag);
  });
}

// The unary functions EltwiseGrad differentiates.
using Fn = GradFn;

// f'(x) for y = f(x) (alpha: LeakyRelu's slope, Elu's alpha), one function per f so that each
// loop below is compiled without a switch inside.
template <Fn F, class C>
inline C derivative(C x, C y, C alpha) {
  const C pi = static_cast<C>(3.14159265358979323846);
  if constexpr (F == Fn::Relu) return x > 0 ? C(1) : C(0);
  if constexpr (F == Fn::LeakyRelu) return x >= 0 ? C(1) : alpha;
  if constexpr (F == Fn::Elu) return x >= 0 ? C(1) : y + alpha;
  if constexpr (F == Fn::Sigmoid) return y * (1 - y);
  if constexpr (F == Fn::Tanh) return 1 - y * y;
  if constexpr (F == Fn::Exp) return y;
  if constexpr (F == Fn::Log) return 1 / x;
  if constexpr (F == Fn::Sqrt) return C(0.5) / y;
  if constexpr (F == Fn::Reciprocal) return -y * y;
  if constexpr (F == Fn::Erf) return 2 / std::sqrt(pi) * std::exp(-x * x);
  if constexpr (F == Fn::Softplus) return 1 / (1 + std::exp(-x));
  if constexpr (F == Fn::Abs) return x > 0 ? C(1) : (x < 0 ? C(-1) : C(0));
  if constexpr (F == Fn::Sin) return std::cos(x);
  if constexpr (F == Fn::Cos) return -std::sin(x);
  if constexpr (F == Fn::Clip) return x == y ? C(1) : C(0);
  if constexpr (F == Fn::Gelu)
    return C(0.5) * (1 + std::erf(x / std::sqrt(C(2)))) +
           x * std::exp(C(-0.5) * x * x) / std::sqrt(2 * pi);
  if constexpr (F == Fn::GeluTanh) {
    const C c = std::sqrt(2 / pi), u = c * (x + C(0.044715) * x * x * x), t = std::tanh(u);
    return C(0.5) * (1 + t) + C(0.5) * x * (1 - t * t) * c * (1 + 3 * C(0.044715) * x * x);
  }
  if constexpr (F == Fn::HardSigmoid) return y > 0 && y < 1 ? alpha : C(0);
  if constexpr (F == Fn::HardSwish) return x < -3 ? C(0) : (x > 3 ? C(1) : x / 3 + C(0.5));
  if constexpr (F == Fn::Celu) return x >= 0 ? C(1) : std::exp(x / alpha);
  if constexpr (F == Fn::Softsign) return 1 / ((1 + std::abs(x)) * (1 + std::abs(x)));
  if constexpr (F == Fn::ThresholdedRelu) return x > alpha ? C(1) : C(0);
  if constexpr (F == Fn::Shrink) return x < -alpha || x > alpha ? C(1) : C(0);
  if constexpr (F == Fn::Tan) return 1 + y * y;
  if constexpr (F == Fn::Asin) return 1 / std::sqrt(1 - x * x);
  if constexpr (F == Fn::Acos) return -1 / std::sqrt(1 - x * x);
  if constexpr (F == Fn::Atan) return 1 / (1 + x * x);
  if constexpr (F == Fn::Sinh) return std::cosh(x);
  if constexpr (F == Fn::Cosh) return std::sinh(x);
  if constexpr (F == Fn::Asinh) return 1 / std::sqrt(x * x + 1);
  if constexpr (F == Fn::Acosh) return 1 / std::sqrt(x * x - 1);
  if constexpr (F == Fn::Atanh) return 1 / (1 - x * x);
  return C(0);
}

// Calls body(std::integral_constant<Fn, f>{}): turns the run-time choice into a compile-time one.
template <class Body>
__attribute__((always_inline)) inline void with_fn(Fn f, Body body) {
  switch (f) {
#define VOLT_FN_CASE(name) \
  case Fn::name:           \
    return body(std::integral_constant<Fn, Fn::name>{});
    VOLT_FN_CASE(Relu)
    VOLT_FN_CASE(LeakyRelu)
    VOLT_FN_CASE(Elu)
    VOLT_FN_CASE(Sigmoid)
    VOLT_FN_CASE(Tanh)
    VOLT_FN_CASE(Exp)
    VOLT_FN_CASE(Log)
    VOLT_FN_CASE(Sqrt)
    VOLT_FN_CASE(Reciprocal)
    VOLT_FN_CASE(Erf)
    VOLT_FN_CASE(Softplus)
    VOLT_FN_CASE(Abs)
    VOLT_FN_CASE(Sin)
    VOLT_FN_CASE(Cos)
    VOLT_FN_CASE(Clip)
    VOLT_FN_CASE(Gelu)
    VOLT_FN_CASE(GeluTanh)
    VOLT_FN_CASE(HardSigmoid)
    VOLT_FN_CASE(HardSwish)
    VOLT_FN_CASE(Celu)
    VOLT_FN_CASE(Softsign)
    VOLT_FN_CASE(ThresholdedRelu)
    VOLT_FN_CASE(Shrink)
    VOLT_FN_CASE(Tan)
    VOLT_FN_CASE(Asin)
    VOLT_FN_CASE(Acos)
    VOLT_FN_CASE(Atan)
    VOLT_FN_CASE(Sinh)
    VOLT_FN_CASE(Cosh)
    VOLT_FN_CASE(Asinh)
    VOLT_FN_CASE(Acosh)
    VOLT_FN_CASE(Atanh)
#undef VOLT_FN_CASE
  }
}

// dx = dy * f'(x, y) over n elements, in C arithmetic.
template <class T, class C>
__attribute__((always_inline)) inline void eltwise_grad_loop(Fn fn, C alpha, const T* dy,
                                                             const T* x, const T* y,
                                                             T* __restrict dx, int64_t n) {
  with_fn(
      fn, [&](auto f) __attribute__((always_inline)) {
        constexpr Fn F = decltype(f)::value;
        if constexpr (F == Fn::Relu) {  // the hot case in training: a select, not a product
          for (int64_t i = 0; i < n; ++i)
            dx[i] = static_cast<C>(x[i]) > C(0) ? dy[i] : static_cast<T>(C(0));
        } else {
          for (int64_t i = 0; i < n; ++i)
            dx[i] = static_cast<T>(static_cast<C>(
                static_cast<C>(dy[i]) *
                derivative<F, C>(static_cast<C>(x[i]), static_cast<C>(y[i]), alpha)));
        }
      });
}

// The float case, compiled for AVX-512 and AVX2 too.
VOLT_SIMD_CLONES void eltwise_grad_f32(Fn fn, float alpha, const float* dy, const float* x,
                                       const float* y, float* dx, int64_t n) {
  eltwise_grad_loop<float, float>(fn, alpha, dy, x, y, dx, n);
}

class EltwiseGrad final : public Kernel {
 public:
  explicit EltwiseGrad(const Node& n) : fn_(grad_fn_of(n)), alpha_(grad_fn_alpha(n, fn_)) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.dtype(0), ctx.shape(0)); }
  void run(RunContext& ctx) const override {
    const int64_t n = ctx.input(0).numel();
    dispatch_gradient(ctx, ctx.input(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = typename Compute<T>::type;
      const T* dy = static_cast<const T*>(ctx.input(0).raw());
      const T* x = static_cast<const T*>(ctx.input(1).raw());
      const T* y = static_cast<const T*>(ctx.input(2).raw());
      T* dx = static_cast<T*>(ctx.output(0).raw());
      parallel_chunks(n, kChunk, [&](int64_t o, int64_t end) {
        if constexpr (std::is_same_v<T, float>)
          eltwise_grad_f32(fn_, alpha_, dy + o, x + o, y + o, dx + o, end - o);
        else
          eltwise_grad_loop<T, C>(fn_, static_cast<C>(alpha_), dy + o, x + o, y + o, dx + o,
                                  end - o);
      });
    });
  }

 private:
  // Elementwise work is split among threads in chunks of this many elements.
  static constexpr int64_t kChunk = 32768;

  Fn fn_;
  float alpha_;
};

// d(a^b): wrt a: dy * b * a^(b-1); wrt b: dy * y * ln(a). Inputs broadcast to dy's shape.
class PowGrad final : public Kernel {
 public:
  explicit PowGrad(const Node& n) : wrt_(n.attr_int("wrt", 0)) {}
  void infer(InferContext& ctx) const override {
    ctx.set_output(0, ctx.dtype(wrt_ == 0 ? 1 : 2), ctx.shape(0));
  }
  void run(RunContext& ctx) const override {
    const Tensor &dyt = ctx.input(0), &at = ctx.input(1), &bt = ctx.input(2), &yt = ctx.input(3);
    const auto dy = to_doubles(dyt), a = to_doubles(at), b = to_doubles(bt), y = to_doubles(yt);
    std::vector<double> out(dy.size());
    BroadcastIterator(dyt.shape(), {broadcast_strides(at.shape(), dyt.shape()),
                                    broadcast_strides(bt.shape(), dyt.shape())})
        .for_each([&, e = size_t{0}](const int64_t* off) mutable {
          const double av = a[off[0]], bv = b[off[1]];
          out[e] = wrt_ == 0 ? dy[e] * bv * std::pow(av, bv - 1) : dy[e] * y[e] * std::log(av);
          ++e;
        });
    from_doubles(ctx.output(0), out);
  }

 private:
  int64_t wrt_;
};

class Mask final : public Kernel {
 public:
  explicit Mask(const Node& n) : invert_(n.attr_int("invert", 0) != 0) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.dtype(0), ctx.shape(0)); }
  void run(RunContext& ctx) const override {
    const Tensor &dyt = ctx.input(0), &ct = ctx.input(1);
    auto v = to_doubles(dyt);
    const bool* c = ct.data<bool>();
    BroadcastIterator(dyt.shape(), {broadcast_strides(ct.shape(), dyt.shape())})
        .for_each([&, e = size_t{0}](const int64_t* off) mutable {
          if (c[off[0]] == invert_) v[e] = 0;
          ++e;
        });
    from_doubles(ctx.output(0), v);
  }

 private:
  bool invert_;
};

// The gradient of MatMul for any ranks (1-D operands and broadcast batches included).
class MatMulGrad final : public Kernel {
 public:
  explicit MatMulGrad(const Node& n) : wrt_(n.attr_int("wrt", 0)) {}
  void infer(InferContext& ctx) const override {
    ctx.set_output(0, ctx.dtype(1 + wrt_), ctx.shape(1 + wrt_));
  }
  void run(RunContext& ctx) const override {
    Shape a = ctx.input(1).shape(), b = ctx.input(2).shape();
    if (a.size() == 1) a.insert(a.begin(), 1);
    if (b.size() == 1) b.push_back(1);
    const int64_t m = a[a.size() - 2], k = a.back(), n = b.back();
    const Shape batch = broadcast_shapes(
        {Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2)}, ctx.node());
    const int64_t nb = numel_of(batch);
    const auto A = to_doubles(ctx.input(1)), B = to_doubles(ctx.input(2)),
               dY = to_doubles(ctx.input(0));
    const auto sa = broadcast_strides(Shape(a.begin(), a.end() - 2), batch),
               sb = broadcast_strides(Shape(b.begin(), b.end() - 2), batch);
    Shape full = batch;
    full.push_back(wrt_ == 0 ? m : k);
    full.push_back(wrt_ == 0 ? k : n);
    std::vector<double> g(static_cast<size_t>(numel_of(full)), 0.0);
    for (int64_t bi = 0; bi < nb; ++bi) {
      int64_t rem = bi, oa = 0, ob = 0;
      for (size_t d = batch.size(); d-- > 0;) {
        oa += (rem % batch[d]) * sa[d];
        ob += (rem % batch[d]) * sb[d];
        rem /= batch[d];
      }
      const double* pa = A.data() + oa * m * k;
      const double* pb = B.data() + ob * k * n;
      const double* pg = dY.data() + bi * m * n;
      double* out = g.data() + bi * (wrt_ == 0 ? m * k : k * n);
      if (wrt_ == 0) {
        for (int64_t i = 0; i < m; ++i)
          for (int64_t p = 0; p < k; ++p) {
            double s = 0;
            for (int64_t j = 0; j < n; ++j) s += pg[i * n + j] * pb[p * n + j];
            out[i * k + p] = s;
          }
      } else {
        for (int64_t p = 0; p < k; ++p)
          for (int64_t j = 0; j < n; ++j) {
            double s = 0;
            for (int64_t i = 0; i < m; ++i) s += pa[i * k + p] * pg[i * n + j];
            out[p * n + j] = s;
          }
      }
    }
    const Shape& target = wrt_ == 0 ? a : b;
    std::vector<double> r = sum_to_shape(g, full, target, ctx.node());
    from_doubles(ctx.output(0), r);  // a 1-D operand has the same elements as its promoted form
  }

 private:
  int64_t wrt_;
};

class GatherGrad final : public Kernel {
 public:
  explicit GatherGrad(const Node& n) : axis_(n.attr_int("axis", 0)) {}
  void infer(InferContext& ctx) const override { infer_shaped_by(ctx, 2); }
  void run(RunContext& ctx) const override {
    const Shape data = shape_from(ctx.input(2), ctx.node());
    const auto idx = to_int64_vector(ctx.input(1), ctx.node(), "indices");
    const Tensor& dyt = ctx.input(0);
    Tensor& dx = ctx.output(0);
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(data.size()), ctx.node());
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= data[d];
    for (size_t d = static_cast<size_t>(axis) + 1; d < data.size(); ++d) inner *= data[d];
    const int64_t n = data[axis], k = static_cast<int64_t>(idx.size());
    for (int64_t i : idx)
      VOLT_CHECK(i >= -n && i < n, InvalidArgument,
                 ctx.node().describe() + ": index " + std::to_string(i) + " out of range");
    VOLT_CHECK(dyt.numel() == outer * k * inner && dx.numel() == numel_of(data), InvalidArgument,
               ctx.node().describe() + ": the gradient does not match the gathered shape");
    // Zeros, then each gathered row's gradient added back where it came from, in index order
    // (the order of additions for repeated indices is fixed), in the tensor's own precision.
    dispatch_gradient(ctx, dyt.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = typename Compute<T>::type;
      const T* g = static_cast<const T*>(dyt.raw());
      T* out = static_cast<T*>(dx.raw());
      std::fill(out, out + dx.numel(), static_cast<T>(C(0)));
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < k; ++j) {
          T* dst = out + (o * n + (idx[j] < 0 ? idx[j] + n : idx[j])) * inner;
          const T* src = g + (o * k + j) * inner;
          for (int64_t s = 0; s < inner; ++s)
            dst[s] = static_cast<T>(static_cast<C>(dst[s]) + static_cast<C>(src[s]));
        }
    });
  }

 private:
  int64_t axis_;
};

// Broadcasts the gradient of a reduction back over the reduced axes (divided by the count
// for a mean).
class ReduceGrad final : public Kernel {
 public:
  explicit ReduceGrad(const Node& n)
      : keepdims_(n.attr_int("keepdims", 1) != 0),
        noop_(n.attr_int("noop_with_empty_axes", 0) != 0),
        mean_(n.attr_int("mean", 0) != 0),
        attr_axes_(n.attr_ints("axes")) {}
  void infer(InferContext& ctx) const override { infer_shaped_by(ctx, 1); }
  void run(RunContext& ctx) const override {
    const Shape x = shape_from(ctx.input(1), ctx.node());
    std::vector<int64_t> axes =
        ctx.has_input(2) ? to_int64_vector(ctx.input(2), ctx.node(), "axes") : attr_axes_;
    const Tensor& dyt = ctx.input(0);
    Tensor& out = ctx.output(0);
    if (axes.empty() && noop_) {
      VOLT_CHECK(dyt.nbytes() == out.nbytes(), InvalidArgument,
                 ctx.node().describe() + ": the gradient does not match the input");
      std::memcpy(out.raw(), dyt.raw(), out.nbytes());
      return;
    }
    std::vector<char> reduced(x.size(), axes.empty() ? 1 : 0);
    for (int64_t a : axes)
      reduced[normalize_axis(a, static_cast<int64_t>(x.size()), ctx.node())] = 1;
    Shape kept;  // dy seen with the reduced axes as size 1
    int64_t count = 1;
    for (size_t d = 0; d < x.size(); ++d) {
      kept.push_back(reduced[d] ? 1 : x[d]);
      if (reduced[d]) count *= x[d];
    }
    VOLT_CHECK(dyt.numel() == numel_of(kept), InvalidArgument,
               ctx.node().describe() + ": the gradient " + shape_str(dyt.shape()) +
                   " does not match the reduction of " + shape_str(x));
    const double scale = mean_ && count ? 1.0 / static_cast<double>(count) : 1.0;
    const BroadcastIterator rows(x, {broadcast_strides(kept, x)});
    dispatch_gradient(ctx, dyt.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = typename Compute<T>::type;
      const T* src = static_cast<const T*>(dyt.raw());
      T* dst = static_cast<T*>(out.raw());
      const C s = static_cast<C>(scale);
      auto scaled = [s](T v) { return static_cast<T>(static_cast<C>(v) * s); };
      int64_t e = 0;
      // Each row of the output either repeats one gradient element (the innermost axis was
      // reduced) or is a row of the gradient.
      rows.for_each_row([&](const int64_t* off, int64_t n, const int64_t* step) {
        if (step[0] == 0)
          std::fill(dst + e, dst + e + n, scaled(src[off[0]]));
        else
          for (int64_t i = 0; i < n; ++i) dst[e + i] = scaled(src[off[0] + i * step[0]]);
        e += n;
      });
    });
  }

 private:
  bool keepdims_, noop_, mean_;
  std::vector<int64_t> attr_axes_;
};

class SoftmaxGrad final : public Kernel {
 public:
  explicit SoftmaxGrad(const Node& n)
      : axis_(n.attr_int("axis", -1)),
        log_(n.attr_int("log", 0) != 0),
        coerced_(n.attr_int("coerced", 0) != 0) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.dtype(0), ctx.shape(0)); }
  void run(RunContext& ctx) const override {
    const Shape& s = ctx.input(1).shape();
    const int64_t r = static_cast<int64_t>(s.size());
    int64_t outer = 1, n = 1, inner = 1;
    if (coerced_) {
      const int64_t axis = normalize_axis(axis_, r, ctx.node(), true);
      for (int64_t i = 0; i < r; ++i) (i < axis ? outer : n) *= s[i];
    } else if (r > 0) {
      const int64_t axis = normalize_axis(axis_, r, ctx.node());
      for (int64_t i = 0; i < r; ++i) (i < axis ? outer : (i == axis ? n : inner)) *= s[i];
    }
    const auto dy = to_doubles(ctx.input(0)), y = to_doubles(ctx.input(1));
    std::vector<double> dx(dy.size());
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        double acc = 0;
        for (int64_t j = 0; j < n; ++j) {
          const size_t e = static_cast<size_t>((o * n + j) * inner + i);
          acc += log_ ? dy[e] : dy[e] * y[e];
        }
        for (int64_t j = 0; j < n; ++j) {
          const size_t e = static_cast<size_t>((o * n + j) * inner + i);
          dx[e] = log_ ? dy[e] - std::exp(y[e]) * acc : y[e] * (dy[e] - acc);
        }
      }
    from_doubles(ctx.output(0), dx);
  }

 private:
  int64_t axis_;
  bool log_, coerced_;
};

// The gradient of SoftmaxCrossEntropyLoss (softmax=1) or NegativeLogLikelihoodLoss (softmax=0)
// with respect to the scores / log-probabilities.
class LossGrad final : public Kernel {
 public:
  explicit LossGrad(const Node& n)
      : reduction_(n.attr_string("reduction", "mean")),
        softmax_(n.attr_int("softmax", 1) != 0),
        has_ignore_(n.has_attr("ignore_index")),
        ignore_(n.attr_int("ignore_index", 0)) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.dtype(1), ctx.shape(1)); }
  void run(RunContext& ctx) const override {
    const Tensor& xt = ctx.input(1);
    const int64_t n = xt.dim(0), c = xt.dim(1), inner = xt.numel() / std::max<int64_t>(n * c, 1);
    const auto dl = to_doubles(ctx.input(0)), x = to_doubles(xt);
    const auto labels = to_int64_vector(ctx.input(2), ctx.node(), "labels");
    VOLT_CHECK(static_cast<int64_t>(labels.size()) == n * inner, InvalidArgument,
               ctx.node().describe() + ": labels do not match the scores");
    const std::vector<double> w =
        ctx.has_input(3) ? to_doubles(ctx.input(3)) : std::vector<double>{};
    auto weight_of = [&](int64_t cls) {
      return (has_ignore_ && cls == ignore_) ? 0.0 : (w.empty() ? 1.0 : w[cls]);
    };
    double total_w = 0;
    for (int64_t l : labels) total_w += weight_of(l);
    std::vector<double> dx(x.size(), 0.0);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t cls = labels[b * inner + i];
        const double wt = weight_of(cls);
        if (wt == 0) continue;
        VOLT_CHECK(cls >= 0 && cls < c, InvalidArgument,
                   ctx.node().describe() + ": label " + std::to_string(cls) + " out of range");
        double coef = reduction_ == "none" ? dl[b * inner + i] : dl[0];
        if (reduction_ == "mean") coef /= total_w;
        coef *= wt;
        if (!softmax_) {
          dx[(b * c + cls) * inner + i] = -coef;
          continue;
        }
        double mx = -INFINITY, sum = 0;
        for (int64_t k = 0; k < c; ++k) mx = std::max(mx, x[(b * c + k) * inner + i]);
        for (int64_t k = 0; k < c; ++k) sum += std::exp(x[(b * c + k) * inner + i] - mx);
        for (int64_t k = 0; k < c; ++k) {
          const double p = std::exp(x[(b * c + k) * inner + i] - mx) / sum;
          dx[(b * c + k) * inner + i] = coef * (p - (k == cls ? 1.0 : 0.0));
        }
      }
    from_doubles(ctx.output(0), dx);
  }

 private:
  std::string reduction_;
  bool softmax_, has_ignore_;
  int64_t ignore_;
};

class DropoutGrad final : public Kernel {
 public:
  explicit DropoutGrad(const Node&) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.dtype(0), ctx.shape(0)); }
  void run(RunContext& ctx) const override {
    auto v = to_doubles(ctx.input(0));
    const bool* mask = ctx.input(1).data<bool>();
    const double ratio = ctx.has_input(2) ? to_doubles(ctx.input(2))[0] : 0.5;
    for (size_t i = 0; i < v.size(); ++i) v[i] = mask[i] ? v[i] / (1 - ratio) : 0;
    from_doubles(ctx.output(0), v);
  }
};

// The gradient of Tile: each element of x receives the sum of its copies. Inputs (dy, shape of x).
class TileGrad final : public Kernel {
 public:
  explicit TileGrad(const Node&) {}
  void infer(InferContext& ctx) const override { infer_shaped_by(ctx, 1); }
  void run(RunContext& ctx) const override {
    const Shape x = shape_from(ctx.input(1), ctx.node());
    const Shape& y = ctx.input(0).shape();
    VOLT_CHECK(x.size() == y.size(), InvalidModel,
               ctx.node().describe() + ": TileGrad: ranks differ");
    const auto dy = to_doubles(ctx.input(0));
    std::vector<double> dx(static_cast<size_t>(numel_of(x)), 0.0);
    std::vector<int64_t> at(y.size(), 0);
    for (size_t e = 0; e < dy.size(); ++e) {
      int64_t off = 0;
      for (size_t d = 0; d < x.size(); ++d) off = off * x[d] + at[d] % x[d];
      dx[static_cast<size_t>(off)] += dy[e];
      for (size_t d = y.size(); d-- > 0;) {
        if (++at[d] < y[d]) break;
        at[d] = 0;
      }
    }
    from_doubles(ctx.output(0), dx);
  }
};

// The gradient of DepthToSpace in CRD mode (DCR's is SpaceToDepth):
// dx[n, c*b*b + i*b + j, h, w] = dy[n, c, h*b + i, w*b + j].
class DepthToSpaceGrad final : public Kernel {
 public:
  explicit DepthToSpaceGrad(const Node& n) : b_(n.attr_int("blocksize", 0)) {}
  void infer(InferContext& ctx) const override {
    const Shape& y = ctx.shape(0);
    if (y.size() != 4 || b_ <= 0) return ctx.set_output_unknown(0, ctx.dtype(0));
    ctx.set_output(0, ctx.dtype(0), {y[0], y[1] * b_ * b_, y[2] / b_, y[3] / b_});
  }
  void run(RunContext& ctx) const override {
    const Shape& y = ctx.input(0).shape();
    VOLT_CHECK(y.size() == 4 && b_ > 0 && y[2] % b_ == 0 && y[3] % b_ == 0, InvalidModel,
               ctx.node().describe() + ": DepthToSpaceGrad: bad shape or blocksize");
    const int64_t N = y[0], C = y[1], H = y[2] / b_, W = y[3] / b_;
    const auto dy = to_doubles(ctx.input(0));
    std::vector<double> dx(dy.size());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < b_; ++i)
          for (int64_t j = 0; j < b_; ++j)
            for (int64_t h = 0; h < H; ++h)
              for (int64_t w = 0; w < W; ++w)
                dx[static_cast<size_t>((((n * C + c) * b_ + i) * b_ + j) * H * W + h * W + w)] =
                    dy[static_cast<size_t>(((n * C + c) * H * b_ + h * b_ + i) * W * b_ + w * b_ +
                                           j)];
    from_doubles(ctx.output(0), dx);
  }

 private:
  int64_t b_;
};

}  // namespace

VOLT_REGISTER_KERNEL(sum_to_shape, volt_kernel("SumToShape", make_kernel<SumToShape>));
VOLT_REGISTER_KERNEL(scale, volt_kernel("Scale", make_kernel<Scale>));
VOLT_REGISTER_KERNEL(zeros_like, volt_kernel("ZerosLike", [](const Node& n) {
                       return std::make_unique<FillLike>(n, 0.0);
                     }));
VOLT_REGISTER_KERNEL(ones_like, volt_kernel("OnesLike", [](const Node& n) {
                       return std::make_unique<FillLike>(n, 1.0);
                     }));
VOLT_REGISTER_KERNEL(eltwise_grad, volt_kernel("EltwiseGrad", make_kernel<EltwiseGrad>));
VOLT_REGISTER_KERNEL(pow_grad, volt_kernel("PowGrad", make_kernel<PowGrad>));
VOLT_REGISTER_KERNEL(mask, volt_kernel("Mask", make_kernel<Mask>));
VOLT_REGISTER_KERNEL(matmul_grad, volt_kernel("MatMulGrad", make_kernel<MatMulGrad>));
VOLT_REGISTER_KERNEL(gather_grad, volt_kernel("GatherGrad", make_kernel<GatherGrad>));
VOLT_REGISTER_KERNEL(reduce_grad, volt_kernel("ReduceGrad", make_kernel<ReduceGrad>));
VOLT_REGISTER_KERNEL(softmax_grad, volt_kernel("SoftmaxGrad", make_kernel<SoftmaxGrad>));
VOLT_REGISTER_KERNEL(loss_grad, volt_kernel("LossGrad", make_kernel<LossGrad>));
VOLT_REGISTER_KERNEL(tile_grad, volt_kernel("TileGrad", make_kernel<TileGrad>));
VOLT_REGISTER_KERNEL(depth_to_space_grad,
                     volt_kernel("DepthToSpaceGrad", make_kernel<DepthToSpaceGrad>));
VOLT_REGISTER_KERNEL(dropout_grad, volt_kernel("DropoutGrad", make_kernel<DropoutGrad>));

}  // namespace volt
