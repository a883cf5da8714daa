// Elementwise unary ops. f32 (and bf16) tensors of useful size run on oneDNN's eltwise
// primitive; everything else, and every other dtype, on the reference loop below.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "operators/common/dispatch.hpp"
#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/simd_clones.hpp"
#include "operators/common/vector_atan.hpp"
#include "operators/common/vector_erf.hpp"
#include "operators/common/vector_exp.hpp"
#include "operators/common/vector_log.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

// Each functor computes one element in the compute type C (float for 16-bit floats).
struct Params {
  float alpha = 0, beta = 0, gamma = 0;
};

// exp, floor, ceil and round in forms the compiler vectorizes where the library's are calls
// per element (the library is built for baseline x86-64, without SSE4.1's rounding): exp of
// floats by vector_exp (2 ulp); floor and ceil from the truncation, round half to even by
// adding and removing 2^mantissa bits, exact, signed zeros kept; values too large to have
// a fraction (and infinities, NaN) as they are.
template <class C>
C exp_of(C x) {
  if constexpr (std::is_same_v<C, float>)
    return vector_exp(x);
  else
    return std::exp(x);
}
template <class C>
C whole_part(C x) {  // trunc(x) for |x| < 2^23 (float) or 2^52 (double)
  if constexpr (std::is_same_v<C, float>)
    return static_cast<C>(static_cast<int32_t>(x));
  else
    return static_cast<C>(static_cast<int64_t>(x));
}
template <class C>
constexpr C kNoFraction = std::is_same_v<C, float> ? C(8388608.0) : C(4503599627370496.0);
template <class C>
C floor_of(C x) {
  if (!(std::abs(x) < kNoFraction<C>)) return x;
  const C t = whole_part(x);
  return t == x ? x : (t > x ? t - C(1) : t);
}
template <class C>
C ceil_of(C x) {
  if (!(std::abs(x) < kNoFraction<C>)) return x;
  const C t = whole_part(x);
  const C r = t == x ? x : (t < x ? t + C(1) : t);
  return std::copysign(r, x);  // (ceil(-0.5) is -0)
}
template <class C>
C round_half_even_of(C x) {
  if (!(std::abs(x) < kNoFraction<C>)) return x;
  // (|x| + 2^23 lies in [2^23, 2^24), where floats are the integers: the addition rounds.)
  return std::copysign((std::abs(x) + kNoFraction<C>)-kNoFraction<C>, x);
}

#define VOLT_UNARY(Name, expr)               \
  struct Name {                              \
    static constexpr bool kIntegers = false; \
    Params p;                                \
    template <class C>                       \
    C operator()(C x) const {                \
      (void)p;                               \
      return expr;                           \
    }                                        \
  };

VOLT_UNARY(ReluFn, x > C(0) ? x : C(0))
VOLT_UNARY(LeakyReluFn, x >= C(0) ? x : C(p.alpha * x))
VOLT_UNARY(EluFn, x >= C(0) ? x : C(p.alpha * (exp_of(x) - C(1))))
VOLT_UNARY(SeluFn, C(p.gamma*(x > C(0) ? x : C(p.alpha * (exp_of(x) - C(1))))))
VOLT_UNARY(CeluFn,
           C(std::max(C(0), x) + std::min(C(0), C(p.alpha*(exp_of(x / C(p.alpha)) - C(1))))))
VOLT_UNARY(SigmoidFn, x >= C(0) ? C(1) / (C(1) + exp_of(-x)) : exp_of(x) / (C(1) + exp_of(x)))
VOLT_UNARY(HardSigmoidFn, std::max(C(0), std::min(C(1), C(p.alpha* x + p.beta))))
VOLT_UNARY(HardSwishFn, x* std::max(C(0), std::min(C(1), C(x / C(6) + C(0.5)))))
VOLT_UNARY(TanhFn, std::tanh(x))
VOLT_UNARY(SoftplusFn, x > C(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)))
VOLT_UNARY(SoftsignFn, x / (C(1) + std::abs(x)))
VOLT_UNARY(ExpFn, std::exp(x))
VOLT_UNARY(LogFn, std::log(x))
VOLT_UNARY(SqrtFn, std::sqrt(x))
VOLT_UNARY(ReciprocalFn, C(1) / x)
VOLT_UNARY(FloorFn, floor_of(x))
VOLT_UNARY(CeilFn, ceil_of(x))
VOLT_UNARY(RoundFn, round_half_even_of(x))
VOLT_UNARY(ErfFn, std::erf(x))
VOLT_UNARY(SinFn, std::sin(x))
VOLT_UNARY(CosFn, std::cos(x))
VOLT_UNARY(TanFn, std::tan(x))
VOLT_UNARY(AsinFn, std::asin(x))
VOLT_UNARY(AcosFn, std::acos(x))
VOLT_UNARY(AtanFn, std::atan(x))
VOLT_UNARY(SinhFn, std::sinh(x))
VOLT_UNARY(CoshFn, std::cosh(x))
VOLT_UNARY(AsinhFn, std::asinh(x))
VOLT_UNARY(AcoshFn, std::acosh(x))
VOLT_UNARY(AtanhFn, std::atanh(x))
VOLT_UNARY(ThresholdedReluFn, x > C(p.alpha) ? x : C(0))
VOLT_UNARY(MishFn, x* std::tanh(x > C(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x))))
VOLT_UNARY(GeluFn, C(0.5) * x * (C(1) + std::erf(x / std::sqrt(C(2)))))
VOLT_UNARY(GeluTanhFn, C(0.5) * x *
                           (C(1) + std::tanh(std::sqrt(C(2) / C(3.14159265358979323846)) *
                                             (x + C(0.044715) * x * x * x))))
#undef VOLT_UNARY

// Ops that also apply to integers.
struct AbsFn {
  static constexpr bool kIntegers = true;
  Params p;
  template <class C>
  C operator()(C x) const {
    if constexpr (std::is_unsigned_v<C>)
      return x;
    else
      return x < C(0) ? C(-x) : x;
  }
};
struct NegFn {
  static constexpr bool kIntegers = true;
  Params p;
  template <class C>
  C operator()(C x) const {
    return static_cast<C>(-x);
  }
};
struct SignFn {
  static constexpr bool kIntegers = true;
  Params p;
  template <class C>
  C operator()(C x) const {
    return x > C(0) ? C(1) : (x < C(0) ? static_cast<C>(-1) : C(0));
  }
};
struct IntReluFn {
  static constexpr bool kIntegers = true;
  Params p;
  template <class C>
  C operator()(C x) const {
    return x > C(0) ? x : C(0);
  }
};

Params params_of(const Node& n, float alpha, float beta, float gamma) {
  return {n.attr_float("alpha", alpha), n.attr_float("beta", beta), n.attr_float("gamma", gamma)};
}

template <class Fn>
class Unary final : public Kernel {
 public:
  Unary(const Node& n, Params p) : fn_{p} { (void)n; }
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.dtype(0), ctx.shape(0)); }
  void run(RunContext& ctx) const override {
    const Tensor& in = ctx.input(0);
    Tensor& out = ctx.output(0);
    dispatch_numeric(
        in.dtype(),
        [&](auto tag) {
          using T = typename decltype(tag)::type;
          using C0 = typename Compute<T>::type;
          if constexpr (std::is_same_v<T, bool> ||
                        (!std::is_floating_point_v<C0> && !Fn::kIntegers)) {
            ctx.error(std::string("does not apply to ") + dtype_name(in.dtype()));
          } else {
            using C = typename Compute<T>::type;
            const T* x = static_cast<const T*>(in.raw());
            T* y = static_cast<T*>(out.raw());
            const int64_t n = in.numel();
            // (The functor and pointers by value: read through `this`, its parameters might
            // change with each store to y as far as the compiler knows, and the loop would not
            // vectorize.)
            parallel_chunks(n, 32768, [x, y, fn = fn_](int64_t lo, int64_t hi) {
              for (int64_t i = lo; i < hi; ++i) y[i] = static_cast<T>(fn(static_cast<C>(x[i])));
            });
          }
        },
        ctx.node().op_type.c_str());
  }

 private:
  Fn fn_;
};

// --- oneDNN
// ----------------------------------------------------------------------------------------

struct EltwiseState {
  dnnl::eltwise_forward prim;
  dnnl::memory::desc md, scratch;
};

class DnnlEltwise final : public Kernel {
 public:
  DnnlEltwise(const Node&, dnnl::algorithm alg, float alpha, float beta)
      : alg_(alg), alpha_(alpha), beta_(beta) {}
  void infer(InferContext& ctx) const override {
    const Shape& s = ctx.shape(0);
    if (numel_of(s) < dnnl_adapter::kDnnlMinElements) throw KernelUnsupported{"small tensor"};
    ctx.set_output(0, ctx.dtype(0), s);
    dnnl_adapter::guarded(ctx.node(), [&] {
      auto st = std::make_shared<EltwiseState>();
      st->md = dnnl_adapter::plain_md({numel_of(s)}, dnnl_adapter::to_dnnl(ctx.dtype(0)));
      dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, alg_, st->md, alpha_,
                                    beta_);
      dnnl::eltwise_forward::primitive_desc pd(d, dnnl_adapter::scratch_attr(),
                                               dnnl_adapter::engine());
      st->prim = dnnl::eltwise_forward(pd);
      st->scratch = pd.scratchpad_desc();
      ctx.request_scratch(st->scratch.get_size());
      ctx.set_state(st);
      return 0;
    });
  }
  void run(RunContext& ctx) const override {
    const auto& st = ctx.state<EltwiseState>();
    dnnl_adapter::execute(
        st.prim,
        {{DNNL_ARG_SRC, st.md, ctx.input(0).raw()}, {DNNL_ARG_DST, st.md, ctx.output(0).raw()}},
        st.scratch, ctx.scratch());
  }

 private:
  dnnl::algorithm alg_;
  float alpha_, beta_;
};

const std::vector<DType> kDnnlFloat = {DType::Float, DType::BFloat16};
const std::vector<DType> kSignedTypes = {DType::Float,    DType::Double, DType::Float16,
                                         DType::BFloat16, DType::Int8,   DType::Int16,
                                         DType::Int32,    DType::Int64};

template <class Fn>
KernelDef unary(const char* op, int since, std::vector<DType> types, float alpha = 0,
                float beta = 0, float gamma = 0) {
  return {.op = op,
          .since = since,
          .types = std::move(types),
          .inplace_input = 0,
          .create = [=](const Node& n) {
            return std::make_unique<Unary<Fn>>(n, params_of(n, alpha, beta, gamma));
          }};
}

// Erf and Atan in f32 on volt's vectorized math (vector_erf.hpp, vector_atan.hpp), where the
// loops' std::erf and std::atan are a library call per element (Erf: 8.8 ms on [8, 128, 3072]
// against ONNX Runtime's 2.3).
VOLT_SIMD_CLONES void erf_f32(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = vector_erf(x[i]);
}
VOLT_SIMD_CLONES void atan_f32(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = vector_atan(x[i]);
}
// Log, Softplus and Mish likewise (vector_log.hpp): oneDNN's eltwise log is off by up to 2.7e-5
// relative, and its soft_relu and mish by up to 1.9e-6 absolute where the value is 2e-8 (x =
// -17.7): a hundred times the value.
VOLT_SIMD_CLONES void log_f32(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = vector_log(x[i]);
}
// softplus(x) = max(x, 0) + log1p(exp(-|x|)): no overflow, exact where it underflows to 0.
inline float softplus_of(float x) {
  return (x > 0 ? x : 0.0f) + vector_log1p(vector_exp(x > 0 ? -x : x));
}
VOLT_SIMD_CLONES void softplus_f32(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = softplus_of(x[i]);
}
VOLT_SIMD_CLONES void mish_f32(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * vector_tanh(softplus_of(x[i]));
}

template <void (*F)(const float*, float*, int64_t)>
class VectorMathF32 final : public Kernel {
 public:
  explicit VectorMathF32(const Node&) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.dtype(0), ctx.shape(0)); }
  void run(RunContext& ctx) const override {
    const float* x = ctx.input(0).data<float>();
    float* y = ctx.output(0).data<float>();
    parallel_chunks(ctx.input(0).numel(), 32768,
                    [x, y](int64_t lo, int64_t hi) { F(x + lo, y + lo, hi - lo); });
  }
};

KernelDef vector_math_f32(const char* op, int since,
                          std::unique_ptr<Kernel> (*create)(const Node&)) {
  return {.op = op,
          .since = since,
          .types = {DType::Float},
          .priority = 10,
          .inplace_input = 0,
          .create = create};
}

KernelDef dnnl_unary(const char* op, int since, dnnl::algorithm alg, float alpha_default = 0,
                     float beta_default = 0) {
  return {.op = op,
          .since = since,
          .types = kDnnlFloat,
          .priority = 10,
          .inplace_input = 0,
          .min_elements = dnnl_adapter::kDnnlMinElements,
          .create = [=](const Node& n) {
            return std::make_unique<DnnlEltwise>(n, alg, n.attr_float("alpha", alpha_default),
                                                 n.attr_float("beta", beta_default));
          }};
}

}  // namespace

VOLT_REGISTER_KERNEL(relu, unary<ReluFn>("Relu", 1, kFloatTypes));
VOLT_REGISTER_KERNEL(relu_int,
                     unary<IntReluFn>("Relu", 14,
                                      {DType::Int8, DType::Int16, DType::Int32, DType::Int64}));
VOLT_REGISTER_KERNEL(leaky_relu, unary<LeakyReluFn>("LeakyRelu", 1, kFloatTypes, 0.01f));
VOLT_REGISTER_KERNEL(elu, unary<EluFn>("Elu", 1, kFloatTypes, 1.0f));
VOLT_REGISTER_KERNEL(selu, unary<SeluFn>("Selu", 1, kFloatTypes, 1.67326319217681884765625f, 0,
                                         1.05070102214813232421875f));
VOLT_REGISTER_KERNEL(celu, unary<CeluFn>("Celu", 12, kFloatTypes, 1.0f));
VOLT_REGISTER_KERNEL(sigmoid, unary<SigmoidFn>("Sigmoid", 1, kFloatTypes));
VOLT_REGISTER_KERNEL(hard_sigmoid, unary<HardSigmoidFn>("HardSigmoid", 1, kFloatTypes, 0.2f, 0.5f));
VOLT_REGISTER_KERNEL(hard_swish, unary<HardSwishFn>("HardSwish", 14, kFloatTypes));
VOLT_REGISTER_KERNEL(tanh, unary<TanhFn>("Tanh", 1, kFloatTypes));
VOLT_REGISTER_KERNEL(softplus, unary<SoftplusFn>("Softplus", 1, kFloatTypes));
VOLT_REGISTER_KERNEL(softsign, unary<SoftsignFn>("Softsign", 1, kFloatTypes));
VOLT_REGISTER_KERNEL(exp, unary<ExpFn>("Exp", 1, kFloatTypes));
VOLT_REGISTER_KERNEL(log, unary<LogFn>("Log", 1, kFloatTypes));
VOLT_REGISTER_KERNEL(sqrt, unary<SqrtFn>("Sqrt", 1, kFloatTypes));
VOLT_REGISTER_KERNEL(reciprocal, unary<ReciprocalFn>("Reciprocal", 1, kFloatTypes));
VOLT_REGISTER_KERNEL(floor, unary<FloorFn>("Floor", 1, kFloatTypes));
VOLT_REGISTER_KERNEL(ceil, unary<CeilFn>("Ceil", 1, kFloatTypes));
VOLT_REGISTER_KERNEL(round, unary<RoundFn>("Round", 11, kFloatTypes));
VOLT_REGISTER_KERNEL(erf, unary<ErfFn>("Erf", 9, kFloatTypes));
VOLT_REGISTER_KERNEL(sin, unary<SinFn>("Sin", 7, kFloatTypes));
VOLT_REGISTER_KERNEL(cos, unary<CosFn>("Cos", 7, kFloatTypes));
VOLT_REGISTER_KERNEL(tan, unary<TanFn>("Tan", 7, kFloatTypes));
VOLT_REGISTER_KERNEL(asin, unary<AsinFn>("Asin", 7, kFloatTypes));
VOLT_REGISTER_KERNEL(acos, unary<AcosFn>("Acos", 7, kFloatTypes));
VOLT_REGISTER_KERNEL(atan, unary<AtanFn>("Atan", 7, kFloatTypes));
VOLT_REGISTER_KERNEL(sinh, unary<SinhFn>("Sinh", 9, kFloatTypes));
VOLT_REGISTER_KERNEL(cosh, unary<CoshFn>("Cosh", 9, kFloatTypes));
VOLT_REGISTER_KERNEL(asinh, unary<AsinhFn>("Asinh", 9, kFloatTypes));
VOLT_REGISTER_KERNEL(acosh, unary<AcoshFn>("Acosh", 9, kFloatTypes));
VOLT_REGISTER_KERNEL(atanh, unary<AtanhFn>("Atanh", 9, kFloatTypes));
VOLT_REGISTER_KERNEL(thresholded_relu,
                     unary<ThresholdedReluFn>("ThresholdedRelu", 10, kFloatTypes, 1.0f));
VOLT_REGISTER_KERNEL(mish, unary<MishFn>("Mish", 18, kFloatTypes));
VOLT_REGISTER_KERNEL(abs, unary<AbsFn>("Abs", 1, kNumericTypes));
VOLT_REGISTER_KERNEL(neg, unary<NegFn>("Neg", 1, kSignedTypes));
VOLT_REGISTER_KERNEL(sign, unary<SignFn>("Sign", 9, kNumericTypes));
VOLT_REGISTER_KERNEL(gelu, {.op = "Gelu",
                            .since = 20,
                            .types = kFloatTypes,
                            .inplace_input = 0,
                            .create = [](const Node& n) -> std::unique_ptr<Kernel> {
                              if (n.attr_string("approximate", "none") == "tanh")
                                return std::make_unique<Unary<GeluTanhFn>>(n, Params{});
                              return std::make_unique<Unary<GeluFn>>(n, Params{});
                            }});

using alg = dnnl::algorithm;
VOLT_REGISTER_KERNEL(dnnl_relu, dnnl_unary("Relu", 1, alg::eltwise_relu));
VOLT_REGISTER_KERNEL(dnnl_leaky_relu, dnnl_unary("LeakyRelu", 1, alg::eltwise_relu, 0.01f));
VOLT_REGISTER_KERNEL(dnnl_elu, dnnl_unary("Elu", 1, alg::eltwise_elu, 1.0f));
VOLT_REGISTER_KERNEL(dnnl_sigmoid, dnnl_unary("Sigmoid", 1, alg::eltwise_logistic));
VOLT_REGISTER_KERNEL(dnnl_tanh, dnnl_unary("Tanh", 1, alg::eltwise_tanh));
VOLT_REGISTER_KERNEL(dnnl_exp, dnnl_unary("Exp", 1, alg::eltwise_exp));
VOLT_REGISTER_KERNEL(log_f32, vector_math_f32("Log", 1, make_kernel<VectorMathF32<log_f32>>));
VOLT_REGISTER_KERNEL(dnnl_sqrt, dnnl_unary("Sqrt", 1, alg::eltwise_sqrt));
VOLT_REGISTER_KERNEL(dnnl_abs, dnnl_unary("Abs", 1, alg::eltwise_abs));
VOLT_REGISTER_KERNEL(mish_f32, vector_math_f32("Mish", 18, make_kernel<VectorMathF32<mish_f32>>));
VOLT_REGISTER_KERNEL(erf_f32, vector_math_f32("Erf", 9, make_kernel<VectorMathF32<erf_f32>>));
VOLT_REGISTER_KERNEL(atan_f32, vector_math_f32("Atan", 7, make_kernel<VectorMathF32<atan_f32>>));
VOLT_REGISTER_KERNEL(softplus_f32,
                     vector_math_f32("Softplus", 1, make_kernel<VectorMathF32<softplus_f32>>));
VOLT_REGISTER_KERNEL(dnnl_hard_swish, dnnl_unary("HardSwish", 14, alg::eltwise_hardswish));
VOLT_REGISTER_KERNEL(dnnl_gelu, [] {
  KernelDef d = dnnl_unary("Gelu", 20, alg::eltwise_gelu_erf);
  d.create = [](const Node& n) -> std::unique_ptr<Kernel> {
    const bool tanh = n.attr_string("approximate", "none") == "tanh";
    return std::make_unique<DnnlEltwise>(n, tanh ? alg::eltwise_gelu_tanh : alg::eltwise_gelu_erf,
                                         0.0f, 0.0f);
  };
  return d;
}());

}  // namespace volt
