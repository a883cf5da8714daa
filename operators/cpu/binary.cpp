// Broadcasting binary ops (Add, Sub, Mul, Div, Pow, Max, Min, Sum, Mean, comparisons, logic).
// f32/bf16 with a same-shaped first operand run on oneDNN's binary primitive; the reference
// loop covers every dtype and broadcast pattern.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "operators/common/dispatch.hpp"
#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

// Whether `x` (leading 1s aside) is the trailing part of `out`, so that it repeats whole along
// the leading axes.
inline bool repeats_along_tail(const Shape& x, const Shape& out) {
  size_t first = 0;
  while (first < x.size() && x[first] == 1) ++first;
  const size_t k = x.size() - first;
  if (k == 0 || k > out.size()) return false;
  return std::equal(x.begin() + static_cast<std::ptrdiff_t>(first), x.end(),
                    out.end() - static_cast<std::ptrdiff_t>(k));
}

// Applies out[i] = f(a[ia], b[ib]) over the broadcast of a and b, one output row at a time:
// the innermost loop has stride 0 or 1 in each operand, which the compiler vectorizes.
template <class TA, class TB, class TO, class F>
void broadcast_apply(const Tensor& a, const Tensor& b, Tensor& out, F f) {
  const TA* pa = static_cast<const TA*>(a.raw());
  const TB* pb = static_cast<const TB*>(b.raw());
  TO* po = static_cast<TO*>(out.raw());
  const int64_t n = out.numel();
  if (n == 0) return;
  if (a.shape() == out.shape() && b.shape() == out.shape()) {
    parallel_chunks(n, 32768, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) po[i] = f(pa[i], pb[i]);
    });
    return;
  }
  if (a.shape() == out.shape() && b.numel() == 1) {
    const TB s = pb[0];
    parallel_chunks(n, 32768, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) po[i] = f(pa[i], s);
    });
    return;
  }
  if (b.shape() == out.shape() && a.numel() == 1) {  // (1 - x, 0.5 * x)
    const TA s = pa[0];
    parallel_chunks(n, 32768, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) po[i] = f(s, pb[i]);
    });
    return;
  }
  // One operand whole, the other repeating along the trailing axes (a bias, a per-channel
  // scale of channels-last data): no index arithmetic, no stride vectors.
  const Shape& os = out.shape();
  const bool a_whole = a.shape() == os && repeats_along_tail(b.shape(), os);
  if (a_whole || (b.shape() == os && repeats_along_tail(a.shape(), os))) {
    const int64_t period = a_whole ? b.numel() : a.numel();
    parallel_chunks(n / period, std::max<int64_t>(1, 32768 / period), [&](int64_t lo, int64_t hi) {
      for (int64_t row = lo; row < hi; ++row) {
        const int64_t base = row * period;
        if (a_whole)
          for (int64_t j = 0; j < period; ++j) po[base + j] = f(pa[base + j], pb[j]);
        else
          for (int64_t j = 0; j < period; ++j) po[base + j] = f(pa[j], pb[base + j]);
      }
    });
    return;
  }
  const size_t r = os.size();
  const auto sa = broadcast_strides(a.shape(), os), sb = broadcast_strides(b.shape(), os);
  const int64_t inner = os[r - 1], ia = sa[r - 1], ib = sb[r - 1];
  const int64_t rows = n / inner;
  parallel_for(rows, n > 32768, [&](int64_t row) {
    int64_t rem = row, oa = 0, ob = 0;
    for (size_t d = r - 1; d-- > 0;) {
      const int64_t i = rem % os[d];
      rem /= os[d];
      oa += i * sa[d];
      ob += i * sb[d];
    }
    TO* o = po + row * inner;
    const TA* ra = pa + oa;
    const TB* rb = pb + ob;
    // The innermost strides are 0 or 1: one loop for each pair, so that each vectorizes.
    if (ia == 1 && ib == 1)
      for (int64_t i = 0; i < inner; ++i) o[i] = f(ra[i], rb[i]);
    else if (ia == 1)
      for (int64_t i = 0; i < inner; ++i) o[i] = f(ra[i], rb[0]);
    else if (ib == 1)
      for (int64_t i = 0; i < inner; ++i) o[i] = f(ra[0], rb[i]);
    else
      for (int64_t i = 0; i < inner; ++i) o[i] = f(ra[0], rb[0]);
  });
}

enum class Op {
  Add,
  Sub,
  Mul,
  Div,
  Max,
  Min,
  Mod,
  FMod,
  Equal,
  Less,
  Greater,
  LessEq,
  GreaterEq,
  And,
  Or,
  Xor,
  BitAnd,
  BitOr,
  BitXor
};

bool is_comparison(Op op) {
  return op >= Op::Equal && op <= Op::GreaterEq;
}
bool is_logic(Op op) {
  return op == Op::And || op == Op::Or || op == Op::Xor;
}

// Integer Add, Sub and Mul wrap around on overflow (two's complement, as numpy and ONNX Runtime
// do), computed in an unsigned type of at least 32 bits: signed overflow would be undefined
// behaviour, and narrower unsigned values would be promoted to (signed) int first.
template <class C, bool = std::is_integral_v<C> && !std::is_same_v<C, bool>>
struct WrappingOf {
  using type = C;
};
template <class C>
struct WrappingOf<C, true> {
  using type = std::conditional_t<(sizeof(C) < 4), uint32_t, std::make_unsigned_t<C>>;
};
template <class C>
using Wrapping = typename WrappingOf<C>::type;

template <class T>
void binary_typed(Op op, const Tensor& a, const Tensor& b, Tensor& out, const RunContext& ctx) {
  using C = typename Compute<T>::type;
  using W = Wrapping<C>;
  auto w = [](T v) { return static_cast<C>(v); };
  auto nw = [](C v) { return static_cast<T>(v); };
  auto ww = [](T v) { return static_cast<W>(static_cast<C>(v)); };
  auto wrapped = [](W v) { return static_cast<T>(static_cast<C>(v)); };
  switch (op) {
    case Op::Add:
      return broadcast_apply<T, T, T>(a, b, out, [&](T x, T y) { return wrapped(ww(x) + ww(y)); });
    case Op::Sub:
      return broadcast_apply<T, T, T>(a, b, out, [&](T x, T y) { return wrapped(ww(x) - ww(y)); });
    case Op::Mul:
      return broadcast_apply<T, T, T>(a, b, out, [&](T x, T y) { return wrapped(ww(x) * ww(y)); });
    case Op::Div:
      if constexpr (std::is_integral_v<C>) {
        const T* pb = static_cast<const T*>(b.raw());
        for (int64_t i = 0; i < b.numel(); ++i)
          if (pb[i] == T(0)) ctx.error("integer division by zero");
      }
      // The most negative value divided by -1 overflows (x86 traps): wrap, as negation does.
      return broadcast_apply<T, T, T>(a, b, out, [&](T x, T y) {
        if constexpr (std::is_integral_v<C> && std::is_signed_v<C>) {
          if (w(y) == C(-1)) return wrapped(W(0) - ww(x));
        }
        return nw(w(x) / w(y));
      });
    case Op::Max:
      return broadcast_apply<T, T, T>(a, b, out, [&](T x, T y) {
        if constexpr (std::is_floating_point_v<C>) {
          if (std::isnan(w(x)) || std::isnan(w(y))) return nw(std::numeric_limits<C>::quiet_NaN());
        }
        return w(x) >= w(y) ? x : y;
      });
    case Op::Min:
      return broadcast_apply<T, T, T>(a, b, out, [&](T x, T y) {
        if constexpr (std::is_floating_point_v<C>) {
          if (std::isnan(w(x)) || std::isnan(w(y))) return nw(std::numeric_limits<C>::quiet_NaN());
        }
        return w(x) <= w(y) ? x : y;
      });
    case Op::Mod:
    case Op::FMod:
      if constexpr (std::is_integral_v<C>) {
        const T* pb = static_cast<const T*>(b.raw());
        for (int64_t i = 0; i < b.numel(); ++i)
          if (pb[i] == T(0)) ctx.error("integer modulo by zero");
        // x % -1 is 0, but the most negative value % -1 traps on x86: answered directly.
        auto rem = [&](T x, T y) { return w(y) == C(-1) ? C(0) : C(w(x) % w(y)); };
        if (op == Op::FMod)
          return broadcast_apply<T, T, T>(a, b, out, [&](T x, T y) { return nw(rem(x, y)); });
        return broadcast_apply<T, T, T>(a, b, out, [&](T x, T y) {
          C m = rem(x, y);
          if constexpr (std::is_signed_v<C>) {
            if (m != 0 && ((m < 0) != (w(y) < 0))) m += w(y);
          }
          return nw(m);
        });
      } else {
        if (op == Op::FMod)
          return broadcast_apply<T, T, T>(a, b, out,
                                          [&](T x, T y) { return nw(std::fmod(w(x), w(y))); });
        ctx.error("Mod of floating-point values needs fmod=1");
      }
    case Op::Equal:
      return broadcast_apply<T, T, bool>(a, b, out, [&](T x, T y) { return w(x) == w(y); });
    case Op::Less:
      return broadcast_apply<T, T, bool>(a, b, out, [&](T x, T y) { return w(x) < w(y); });
    case Op::Greater:
      return broadcast_apply<T, T, bool>(a, b, out, [&](T x, T y) { return w(x) > w(y); });
    case Op::LessEq:
      return broadcast_apply<T, T, bool>(a, b, out, [&](T x, T y) { return w(x) <= w(y); });
    case Op::GreaterEq:
      return broadcast_apply<T, T, bool>(a, b, out, [&](T x, T y) { return w(x) >= w(y); });
    case Op::BitAnd:
    case Op::BitOr:
    case Op::BitXor:
      if constexpr (std::is_integral_v<C> && !std::is_same_v<T, bool>) {
        if (op == Op::BitAnd)
          return broadcast_apply<T, T, T>(a, b, out, [](T x, T y) { return T(x & y); });
        if (op == Op::BitOr)
          return broadcast_apply<T, T, T>(a, b, out, [](T x, T y) { return T(x | y); });
        return broadcast_apply<T, T, T>(a, b, out, [](T x, T y) { return T(x ^ y); });
      }
      ctx.error("bitwise ops need integer inputs");
    default:
      ctx.error("unsupported binary op");
  }
}

class Binary final : public Kernel {
 public:
  Binary(const Node& n, Op op) : op_(op) {
    // Before opset 7, broadcasting was opt-in with an explicit axis.
    legacy_broadcast_ = n.opset < 7 && n.attr_int("broadcast", 0) != 0;
    legacy_axis_ = n.attr_int("axis", INT64_MIN);
  }
  void infer(InferContext& ctx) const override {
    VOLT_CHECK(ctx.dtype(0) == ctx.dtype(1), InvalidModel,
               ctx.node().describe() + ": inputs are " + dtype_name(ctx.dtype(0)) + " and " +
                   dtype_name(ctx.dtype(1)) + "; they must match");
    const Shape out = broadcast_shapes(
        {ctx.shape(0), legacy_b_shape(ctx.shape(0), ctx.shape(1), ctx.node())}, ctx.node());
    const DType dt = is_comparison(op_) || is_logic(op_) ? DType::Bool : ctx.dtype(0);
    ctx.set_output(0, dt, out);
  }
  void run(RunContext& ctx) const override {
    const Tensor& a = ctx.input(0);
    Tensor b = ctx.input(1);
    if (legacy_broadcast_) b = b.reshaped(legacy_b_shape(a.shape(), b.shape(), ctx.node()));
    Tensor& out = ctx.output(0);
    if (is_logic(op_)) {
      VOLT_CHECK(a.dtype() == DType::Bool, InvalidModel,
                 ctx.node().describe() + ": inputs must be bool");
      if (op_ == Op::And)
        return broadcast_apply<bool, bool, bool>(a, b, out, [](bool x, bool y) { return x && y; });
      if (op_ == Op::Or)
        return broadcast_apply<bool, bool, bool>(a, b, out, [](bool x, bool y) { return x || y; });
      return broadcast_apply<bool, bool, bool>(a, b, out, [](bool x, bool y) { return x != y; });
    }
    dispatch_numeric(
        a.dtype(),
        [&](auto tag) {
          using T = typename decltype(tag)::type;
          if constexpr (std::is_same_v<T, bool>) {
            if (op_ == Op::Equal)
              return broadcast_apply<bool, bool, bool>(a, b, out,
                                                       [](bool x, bool y) { return x == y; });
            ctx.error("does not apply to bool");
          } else {
            binary_typed<T>(op_, a, b, out, ctx);
          }
        },
        ctx.node().op_type.c_str());
  }

 private:
  // Opset < 7 with broadcast=1: B's dims line up with A's starting at `axis` (default: the end).
  Shape legacy_b_shape(const Shape& a, const Shape& b, const Node& node) const {
    if (!legacy_broadcast_) return b;
    const int64_t axis = legacy_axis_ == INT64_MIN
                             ? static_cast<int64_t>(a.size() - b.size())
                             : normalize_axis(legacy_axis_, static_cast<int64_t>(a.size()), node);
    // B's shape is a run of A's dims from `axis` on (opset < 7 broadcasting).
    VOLT_CHECK(axis >= 0 && axis + static_cast<int64_t>(b.size()) <= static_cast<int64_t>(a.size()),
               InvalidArgument,
               node.describe() + ": B " + shape_str(b) + " does not fit in A " + shape_str(a) +
                   " from axis " + std::to_string(axis));
    Shape s(static_cast<size_t>(axis), 1);
    s.insert(s.end(), b.begin(), b.end());
    while (s.size() < a.size()) s.push_back(1);
    return s;
  }
  Op op_;
  bool legacy_broadcast_ = false;
  int64_t legacy_axis_;
};

// --- Pow: base and exponent may differ in type; the result has the base's type -----------------
class Pow final : public Kernel {
 public:
  explicit Pow(const Node& n) : legacy_(n.opset < 7 && n.attr_int("broadcast", 0) != 0) {}
  void infer(InferContext& ctx) const override {
    Shape b = ctx.shape(1);
    if (legacy_)
      while (b.size() < ctx.shape(0).size()) b.push_back(1);
    ctx.set_output(0, ctx.dtype(0), broadcast_shapes({ctx.shape(0), b}, ctx.node()));
  }
  void run(RunContext& ctx) const override {
    const Tensor& a = ctx.input(0);
    Tensor b = ctx.input(1);
    if (legacy_) {
      Shape s = b.shape();
      while (s.size() < a.rank()) s.push_back(1);
      b = b.reshaped(s);
    }
    Tensor& out = ctx.output(0);
    if (a.dtype() == DType::Float && b.numel() == 1 && out.shape() == a.shape() &&
        float_power_by_constant(a, b, out))
      return;
    dispatch_numeric(a.dtype(), [&](auto ta) {
      using TA = typename decltype(ta)::type;
      dispatch_numeric(b.dtype(), [&](auto tb) {
        using TB = typename decltype(tb)::type;
        if constexpr (std::is_same_v<TA, bool> || std::is_same_v<TB, bool>) {
          ctx.error("does not apply to bool");
        } else {
          broadcast_apply<TA, TB, TA>(a, b, out, [](TA x, TB y) {
            const double r =
                std::pow(static_cast<double>(static_cast<typename Compute<TA>::type>(x)),
                         static_cast<double>(static_cast<typename Compute<TB>::type>(y)));
            if constexpr (std::is_integral_v<TA>)
              return static_cast<TA>(static_cast<int64_t>(r));
            else
              return static_cast<TA>(static_cast<typename Compute<TA>::type>(r));
          });
        }
      });
    });
  }

 private:
  // f32 x to a scalar power the models write (a decomposed LayerNorm's square, GELU's tanh
  // form's cube, a square root or reciprocal) as products, sqrt and division, vectorized: the
  // general loop calls pow in double for every element (13x ONNX Runtime's time on a square).
  // The square is exact as pow's; sqrt is pow(x, 0.5) but for -0 and -inf, made to agree.
  // Other exponents: false (the general loop).
  static bool float_power_by_constant(const Tensor& a, const Tensor& b, Tensor& out) {
    double e = 0;
    dispatch_numeric(b.dtype(), [&](auto tb) {
      using TB = typename decltype(tb)::type;
      if constexpr (!std::is_same_v<TB, bool>)
        e = static_cast<double>(static_cast<typename Compute<TB>::type>(b.data<TB>()[0]));
    });
    const float* x = a.data<float>();
    float* y = out.data<float>();
    auto apply = [&](auto f) {
      parallel_chunks(a.numel(), 32768, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) y[i] = f(x[i]);
      });
      return true;
    };
    if (e == 1) return apply([](float v) { return v; });
    if (e == 2) return apply([](float v) { return v * v; });
    if (e == 3) return apply([](float v) { return static_cast<float>(double{v} * v * v); });
    if (e == 4)
      return apply([](float v) { return static_cast<float>((double{v} * v) * (double{v} * v)); });
    if (e == -1) return apply([](float v) { return 1.0f / v; });
    if (e == 0.5)
      return apply([](float v) { return v == -INFINITY ? INFINITY : std::sqrt(v) + 0.0f; });
    // Quarter powers by square roots (LocalResponseNorm written out, as torch exports it, raises
    // its sum to 0.75: pow in double took 3.1 ms of a CaffeNet's 12.4, ORT 1.1). pow's values at
    // -0 (+0), -inf (+inf) and, for negative exponents, at 0 (+inf) and -inf (+0) kept;
    // negative bases give NaN as pow does.
    if (e == 0.25)
      return apply(
          [](float v) { return v == -INFINITY ? INFINITY : std::sqrt(std::sqrt(v)) + 0.0f; });
    if (e == 0.75)
      return apply([](float v) {
        const float r = std::sqrt(v);
        return v == -INFINITY ? INFINITY : r * std::sqrt(r) + 0.0f;
      });
    if (e == 1.5)
      return apply([](float v) { return v == -INFINITY ? INFINITY : v * std::sqrt(v) + 0.0f; });
    if (e == -0.5)
      return apply([](float v) {
        return v == 0 ? INFINITY : (v == -INFINITY ? 0.0f : 1.0f / std::sqrt(v));
      });
    if (e == -0.75)
      return apply([](float v) {
        const float r = std::sqrt(v);
        return v == 0 ? INFINITY : (v == -INFINITY ? 0.0f : 1.0f / (r * std::sqrt(r)));
      });
    return false;
  }

  bool legacy_;
};

// --- variadic: Sum, Mean, Max, Min fold their inputs pairwise ------------------------------------
class Variadic final : public Kernel {
 public:
  Variadic(const Node&, Op op, bool mean) : op_(op), mean_(mean) {}
  void infer(InferContext& ctx) const override {
    std::vector<Shape> shapes;
    for (size_t i = 0; i < ctx.input_count(); ++i) {
      VOLT_CHECK(ctx.dtype(i) == ctx.dtype(0), InvalidModel,
                 ctx.node().describe() + ": inputs must share one dtype");
      shapes.push_back(ctx.shape(i));
    }
    ctx.set_output(0, ctx.dtype(0), broadcast_shapes(shapes, ctx.node()));
  }
  void run(RunContext& ctx) const override {
    Tensor& out = ctx.output(0);
    dispatch_numeric(out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, bool>) {
        ctx.error("does not apply to bool");
      } else {
        // out = in0 broadcast, then out = op(out, in_i).
        const Tensor& first = ctx.input(0);
        Tensor zero = Tensor::empty(out.dtype(), {});
        broadcast_apply<T, T, T>(first, zero, out, [](T x, T) { return x; });
        for (size_t i = 1; i < ctx.input_count(); ++i)
          binary_typed<T>(op_, out, ctx.input(i), out, ctx);
        if (mean_) {
          T* p = out.data<T>();
          const auto n = static_cast<typename Compute<T>::type>(ctx.input_count());
          for (int64_t i = 0; i < out.numel(); ++i)
            p[i] = static_cast<T>(static_cast<typename Compute<T>::type>(p[i]) / n);
        }
      }
    });
  }

 private:
  Op op_;
  bool mean_;
};

// --- oneDNN
// ----------------------------------------------------------------------------------------
struct BinaryState {
  dnnl::binary prim;
  dnnl::memory::desc a, b, out, scratch;
  bool swapped = false;
};

class DnnlBinary final : public Kernel {
 public:
  DnnlBinary(const Node&, dnnl::algorithm alg, bool commutative)
      : alg_(alg), commutative_(commutative) {}
  void infer(InferContext& ctx) const override {
    if (ctx.dtype(0) != ctx.dtype(1)) throw KernelUnsupported{"mixed dtypes"};
    const Shape out = broadcast_shapes({ctx.shape(0), ctx.shape(1)}, ctx.node());
    if (numel_of(out) < dnnl_adapter::kDnnlMinElements || out.size() > 6)
      throw KernelUnsupported{"small or high-rank tensor"};
    auto st = std::make_shared<BinaryState>();
    // oneDNN broadcasts only the second source.
    Shape a = ctx.shape(0), b = ctx.shape(1);
    if (a != out) {
      if (!commutative_ || b != out) throw KernelUnsupported{"first operand broadcasts"};
      std::swap(a, b);
      st->swapped = true;
    }
    while (b.size() < out.size()) b.insert(b.begin(), 1);
    ctx.set_output(0, ctx.dtype(0), out);
    dnnl_adapter::guarded(ctx.node(), [&] {
      const auto dt = dnnl_adapter::to_dnnl(ctx.dtype(0));
      st->a = dnnl_adapter::plain_md(a, dt);
      st->b = dnnl_adapter::plain_md(b, dt);
      st->out = dnnl_adapter::plain_md(out, dt);
      dnnl::binary::desc d(alg_, st->a, st->b, st->out);
      dnnl::binary::primitive_desc pd(d, dnnl_adapter::scratch_attr(), dnnl_adapter::engine());
      // A broadcast oneDNN has only its reference loop for (along a middle axis, as Swin's
      // attention masks): volt's row loop is vectorized, 1x64x3x49x49 + 1x64x1x49x49 40 -> 0.3 ms.
      if (dnnl_adapter::is_reference(pd))
        throw KernelUnsupported{"oneDNN binary: reference implementation only"};
      st->prim = dnnl::binary(pd);
      st->scratch = pd.scratchpad_desc();
      return 0;
    });
    ctx.request_scratch(st->scratch.get_size());
    ctx.set_state(st);
  }
  void run(RunContext& ctx) const override {
    const auto& st = ctx.state<BinaryState>();
    const void* a = ctx.input(st.swapped ? 1 : 0).raw();
    const void* b = ctx.input(st.swapped ? 0 : 1).raw();
    dnnl_adapter::execute(st.prim,
                          {{DNNL_ARG_SRC_0, st.a, a},
                           {DNNL_ARG_SRC_1, st.b, b},
                           {DNNL_ARG_DST, st.out, ctx.output(0).raw()}},
                          st.scratch, ctx.scratch());
  }

 private:
  dnnl::algorithm alg_;
  bool commutative_;
};

KernelDef binary(const char* op, int since, Op kind, std::vector<DType> types = kNumericTypes) {
  return {.op = op,
          .since = since,
          .types = std::move(types),
          .inplace_input = 0,
          .create = [=](const Node& n) { return std::make_unique<Binary>(n, kind); }};
}
KernelDef compare(const char* op, int since, Op kind) {
  std::vector<DType> types = kNumericTypes;
  types.push_back(DType::Bool);
  return {.op = op, .since = since, .types = types, .create = [=](const Node& n) {
            return std::make_unique<Binary>(n, kind);
          }};
}
KernelDef variadic(const char* op, Op kind, bool mean) {
  return {.op = op, .types = kNumericTypes, .create = [=](const Node& n) {
            return std::make_unique<Variadic>(n, kind, mean);
          }};
}
KernelDef dnnl_binary(const char* op, dnnl::algorithm alg, bool commutative) {
  return {
      .op = op,
      .since = 7,
      .types = {DType::Float, DType::BFloat16},
      .priority = 10,
      .inplace_input = 0,
      .min_elements = dnnl_adapter::kDnnlMinElements,
      .shape_specific = true,  // (volt's loop takes the node in a shape-generic plan)
      .create = [=](const Node& n) { return std::make_unique<DnnlBinary>(n, alg, commutative); }};
}

}  // namespace

VOLT_REGISTER_KERNEL(add, binary("Add", 1, Op::Add));
VOLT_REGISTER_KERNEL(sub, binary("Sub", 1, Op::Sub));
VOLT_REGISTER_KERNEL(mul, binary("Mul", 1, Op::Mul));
VOLT_REGISTER_KERNEL(div, binary("Div", 1, Op::Div));
VOLT_REGISTER_KERNEL(
    mod, {.op = "Mod", .since = 10, .types = kNumericTypes, .create = [](const Node& n) {
            return std::make_unique<Binary>(n, n.attr_int("fmod", 0) ? Op::FMod : Op::Mod);
          }});
VOLT_REGISTER_KERNEL(bitwise_and, binary("BitwiseAnd", 18, Op::BitAnd));
VOLT_REGISTER_KERNEL(bitwise_or, binary("BitwiseOr", 18, Op::BitOr));
VOLT_REGISTER_KERNEL(bitwise_xor, binary("BitwiseXor", 18, Op::BitXor));
VOLT_REGISTER_KERNEL(equal, compare("Equal", 1, Op::Equal));
VOLT_REGISTER_KERNEL(less, compare("Less", 1, Op::Less));
VOLT_REGISTER_KERNEL(greater, compare("Greater", 1, Op::Greater));
VOLT_REGISTER_KERNEL(less_eq, compare("LessOrEqual", 12, Op::LessEq));
VOLT_REGISTER_KERNEL(greater_eq, compare("GreaterOrEqual", 12, Op::GreaterEq));
VOLT_REGISTER_KERNEL(and_op, binary("And", 1, Op::And, {DType::Bool}));
VOLT_REGISTER_KERNEL(or_op, binary("Or", 1, Op::Or, {DType::Bool}));
VOLT_REGISTER_KERNEL(xor_op, binary("Xor", 1, Op::Xor, {DType::Bool}));
VOLT_REGISTER_KERNEL(pow, {.op = "Pow", .types = kNumericTypes, .create = make_kernel<Pow>});
VOLT_REGISTER_KERNEL(sum, variadic("Sum", Op::Add, false));
VOLT_REGISTER_KERNEL(mean, variadic("Mean", Op::Add, true));
VOLT_REGISTER_KERNEL(max, variadic("Max", Op::Max, false));
VOLT_REGISTER_KERNEL(min, variadic("Min", Op::Min, false));

using alg = dnnl::algorithm;
VOLT_REGISTER_KERNEL(dnnl_add, dnnl_binary("Add", alg::binary_add, true));
VOLT_REGISTER_KERNEL(dnnl_sub, dnnl_binary("Sub", alg::binary_sub, false));
VOLT_REGISTER_KERNEL(dnnl_mul, dnnl_binary("Mul", alg::binary_mul, true));
VOLT_REGISTER_KERNEL(dnnl_div, dnnl_binary("Div", alg::binary_div, false));

}  // namespace volt
