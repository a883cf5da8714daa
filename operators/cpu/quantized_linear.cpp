// QuantizedConv and QuantizedMatMul (ai.volt): the one int8 path that every quantized form of a
// convolution or matrix product lowers to (runtime/passes/lower_quantized.cpp): ConvInteger,
// MatMulInteger, QLinearConv, QLinearMatMul, DequantizeLinear -> Conv/MatMul/Gemm ->
// QuantizeLinear, and float layers quantized at load (precision = int8). They run on oneDNN's
// int8 primitives (u8/s8 activations, s8 weights packed once per plan, s32 accumulation on
// VNNI/AMX) with the rescale chain as output scales and post-ops.
//
//   acc[m] = Σ (X - x_zero_point) · W             exact; W was shifted by its zero point
//   volt.output_type INT32: Y = acc
//   otherwise:  v = activation(acc · volt.scales[m] · multiplier + B[m]
//                              [+ volt.residual_scale · (R - volt.residual_zero_point)])
//               FLOAT: Y = v;  UINT8 / INT8: Y = saturate(round_half_even(v) + y_zero_point)
//
// Inputs: 0 X (uint8 or int8), 1 x_zero_point (scalar, optional), 2 W (int8 constant; Conv's
// [M, C/group, k...] or MatMul's [K, N]), 3 B (float [M], optional), 4 multiplier (float scalar,
// optional, known at run time only: a dynamic quantizer's scale), 5 y_zero_point (scalar,
// optional), 6 (QuantizedConv) R, a residual of Y's shape and layout added before the activation
// (a binary post-op: ResNet's Conv -> Add -> Relu): float, or 8-bit with its scale in Y's units
// and zero point as attributes, so that one block's 8-bit output is the next block's shortcut.
// Attributes: Conv's, volt.scales (1 or M floats), volt.output_type (ONNX type code), the fused
// activation (volt.activation, volt.alpha, volt.beta), volt.residual_scale (default 1) and
// volt.residual_zero_point (default 0).
//
// Where oneDNN has no exact int8 kernel (no VNNI on this CPU, whose older kernels add pairs of
// u8·s8 products in saturating 16-bit arithmetic, unless the weights fit in 7 bits; more than 3
// spatial axes), a reference loop computes the same formula exactly.
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

#include "operators/common/cpu_isa.hpp"
#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/epilogue.hpp"
#include "operators/common/fused_activation.hpp"
#include "operators/common/layout.hpp"
#include "operators/common/matmul_shapes.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/common/tensor_values.hpp"
#include "operators/cpu/quantization.hpp"
#include "operators/registry.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

enum Input : size_t {
  kX = 0,
  kXZeroPoint = 1,
  kW = 2,
  kBias = 3,
  kMultiplier = 4,
  kYZeroPoint = 5,
  kResidual = 6  // QuantizedConv: a tensor of Y's shape and layout, added before the activation
};

// One step of what follows the output scales and the multiplier, in order: the same list makes
// the primitive's post-ops and drives the reference loop.
struct Step {
  enum class Kind { Linear, AddResidual, Activate } kind;
  float a = 1, b = 0;  // Linear: a·v + b; AddResidual: v + a·(R - b)
  FusedActivation act;
};

// The steps of a node's attributes (see the formulas at the top).
std::vector<Step> steps_of(const Node& n) {
  using K = Step::Kind;
  std::vector<Step> steps;
  auto activate = [&](const FusedActivation& act) {
    if (act.any()) steps.push_back({K::Activate, 1, 0, act});
  };
  const FusedActivation own = FusedActivation::of(n);
  const bool residual = n.inputs.size() > kResidual && !n.inputs[kResidual].empty();
  if (residual) {
    const float k = n.attr_float("volt.residual_scale", 1.0f),
                z = static_cast<float>(n.attr_int("volt.residual_zero_point", 0));
    VOLT_CHECK(k > 0 && std::isfinite(k) && std::isfinite(z), InvalidModel,
               n.describe() + ": volt.residual_scale must be positive and finite");
    steps.push_back({K::AddResidual, k, z, {}});
  }
  activate(own);
  return steps;
}

// What a primitive takes at run time besides the multiplier: the residual's post-op index, the
// scalar constants of steps made binary post-ops (index, value), and whether it takes X's and
// Y's zero points (not when they are constant zeros: oneDNN's brgemm kernels take none, and its
// older kernels ran ResNet's 1x1 convolutions with a residual 40% longer).
// Constant zero points that are not zero leave the primitive too: X's as a compensation in the
// bias (zx · Σ W per output channel, exact where no padding reads X's zero point), Y's as a
// shift after the last step.
struct PrimitiveArgs {
  int residual = -1;
  std::vector<std::pair<int, float>> constants;
  bool src_zero_point = false, dst_zero_point = false;
  std::vector<float> x_compensation;  // per output channel, in accumulator units
};

// Whether input `i`, a zero point, may be other than zero.
bool zero_point_needed(const InferContext& ctx, size_t i) {
  if (!ctx.has_input(i)) return false;
  const Tensor* t = ctx.input_tensor(i);
  return !t || t->numel() != 1 || value_at(*t, 0) != 0;
}

// Input `i`, a zero point, when it is a constant.
std::optional<int32_t> constant_zero_point(const InferContext& ctx, size_t i) {
  if (!ctx.has_input(i)) return 0;
  const Tensor* t = ctx.input_tensor(i);
  if (!t || t->numel() != 1) return std::nullopt;
  return static_cast<int32_t>(value_at(*t, 0));
}

// zx · Σ W for each output channel of the int8 weights `w` (channels along axis 0, or for a
// product's [K, N] along axis 1), when X's zero point zx is a constant other than zero.
std::vector<float> x_compensation(const InferContext& ctx, const Tensor& w, bool channels_first) {
  const auto zx = constant_zero_point(ctx, kXZeroPoint);
  if (!zx || *zx == 0) return {};
  const int64_t rows = w.shape()[0], cols = w.numel() / std::max<int64_t>(rows, 1);
  std::vector<int64_t> sums(static_cast<size_t>(channels_first ? rows : cols), 0);
  const int8_t* p = w.data<int8_t>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      sums[static_cast<size_t>(channels_first ? r : c)] += p[r * cols + c];
  std::vector<float> out(sums.size());
  for (size_t m = 0; m < sums.size(); ++m) out[m] = static_cast<float>(*zx * sums[m]);
  return out;
}

// What QuantizedConv and QuantizedMatMul share: the attributes, their checks, the primitive's
// attributes and the run-time arguments of its post-ops and zero points.
class QuantizedLinear {
 public:
  // Whether oneDNN's int8 kernels compute this node exactly here. Without VNNI they add pairs of
  // u8·s8 products in saturating 16-bit arithmetic; with weights within [-64, 64] (what
  // quantizers write for such CPUs: ONNX Runtime's reduce_range) a pair stays within
  // 2 * 255 * 64 = 32640 and cannot saturate.
  static bool int8_dot_is_exact(const InferContext& ctx) {
    if (cpu_has_exact_int8_dot()) return true;
    const Tensor* w = ctx.input_tensor(kW);
    if (!w || w->dtype() != DType::Int8) return false;
    const int8_t* v = w->data<int8_t>();
    return std::all_of(v, v + w->numel(), [](int8_t x) { return x >= -64 && x <= 64; });
  }

  explicit QuantizedLinear(const Node& n)
      : scales_(n.attr_floats("volt.scales", {1.0f})),
        out_type_(
            static_cast<DType>(n.attr_int("volt.output_type", static_cast<int64_t>(DType::Float)))),
        steps_(steps_of(n)) {}

 protected:
  // Checks what the pass promised; `m` is the number of output channels.
  void check(const InferContext& ctx, int64_t m) const {
    const DType x = ctx.dtype(kX);
    if (x != DType::UInt8 && x != DType::Int8) ctx.error("X must be uint8 or int8");
    if (ctx.dtype(kW) != DType::Int8) ctx.error("W must be int8");
    if (ctx.has_input(kXZeroPoint) &&
        (ctx.dtype(kXZeroPoint) != x || numel_of(ctx.shape(kXZeroPoint)) != 1))
      ctx.error("x zero point must be one value of X's type");
    if (scales_.size() != 1 && static_cast<int64_t>(scales_.size()) != m)
      ctx.error("volt.scales must hold 1 or " + std::to_string(m) + " values");
    for (float s : scales_)
      if (!std::isfinite(s)) ctx.error("volt.scales must be finite");
    if (ctx.has_input(kBias) && numel_of(ctx.shape(kBias)) != m)
      ctx.error("B must have one value per output channel (" + std::to_string(m) + ")");
    if (ctx.has_input(kBias) && ctx.dtype(kBias) != DType::Float) ctx.error("B must be float");
    if (ctx.has_input(kMultiplier) &&
        (numel_of(ctx.shape(kMultiplier)) != 1 || ctx.dtype(kMultiplier) != DType::Float))
      ctx.error("the multiplier must be a float scalar");
    const bool quantized = out_type_ == DType::UInt8 || out_type_ == DType::Int8;
    if (!quantized && out_type_ != DType::Float && out_type_ != DType::Int32)
      ctx.error("volt.output_type must be float, int32, uint8 or int8");
    if (out_type_ == DType::Int32 &&
        (ctx.has_input(kBias) || ctx.has_input(kMultiplier) || !steps_.empty()))
      ctx.error("an int32 output takes no scale, bias, activation or residual");
    if (ctx.has_input(kYZeroPoint) && (!quantized || ctx.dtype(kYZeroPoint) != out_type_ ||
                                       numel_of(ctx.shape(kYZeroPoint)) != 1))
      ctx.error("y zero point must be one value of Y's type");
  }

  // Output scales (per channel along `channel_axis_mask`), the multiplier as a binary post-op,
  // the steps, the zero points. The bias is the primitive's own, which oneDNN adds before
  // scaling: B / (scale · multiplier), computed each run (bias_for_run) since the multiplier is
  // known only then; a per-channel binary add post-op instead made BERT's products 60% slower.
  // A leading scale step joins the output scales. oneDNN 2.6 keeps one eltwise injector per
  // algorithm, made with the first such post-op's parameters: a second eltwise_linear with other
  // parameters would compute the first's. A Linear that would repeat one becomes binary
  // post-ops with scalar constants instead (mul and add), recorded in `args`.
  // The residual is a binary post-op, or with `residual_in_dst` oneDNN's sum post-op: the
  // residual copied into Y first (same type and layout), which keeps oneDNN's brgemm kernels
  // (with a binary residual it takes its older jit ones: ResNet-50's 1x1 expansions ran twice as
  // long).
  dnnl::primitive_attr primitive_attr(const InferContext& ctx, const dnnl::memory::desc& scalar,
                                      int channel_mask, PrimitiveArgs& args,
                                      const dnnl::memory::desc* residual = nullptr,
                                      bool residual_in_dst = false) const {
    using alg = dnnl::algorithm;
    dnnl::primitive_attr attr = dnnl_adapter::scratch_attr();
    // As binary post-ops the residual's factor k and zero point z are steps around the add:
    // (v/k + R)·k - k·z, the first joining the output scales when nothing comes before it.
    std::vector<Step> steps;
    for (const Step& st : steps_) {
      if (st.kind != Step::Kind::AddResidual || residual_in_dst || (st.a == 1 && st.b == 0)) {
        steps.push_back(st);
        continue;
      }
      steps.push_back({Step::Kind::Linear, 1 / st.a, 0, {}});
      steps.push_back({Step::Kind::AddResidual, 1, 0, {}});
      steps.push_back({Step::Kind::Linear, st.a, -st.a * st.b, {}});
    }
    const auto zy = constant_zero_point(ctx, kYZeroPoint);
    if (zy && *zy != 0) steps.push_back({Step::Kind::Linear, 1, static_cast<float>(*zy), {}});
    // Adjacent affine steps as one: (a1·v + b1)·a2 + b2.
    for (size_t i = 1; i < steps.size();) {
      Step& prev = steps[i - 1];
      if (prev.kind == Step::Kind::Linear && steps[i].kind == Step::Kind::Linear) {
        prev.b = prev.b * steps[i].a + steps[i].b;
        prev.a *= steps[i].a;
        steps.erase(steps.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    std::vector<float> scales = scales_;
    size_t first = 0;
    if (!steps.empty() && steps[0].kind == Step::Kind::Linear && steps[0].b == 0.0f) {
      for (float& v : scales) v *= steps[0].a;
      first = 1;
    }
    attr.set_output_scales(scales.size() > 1 ? channel_mask : 0, scales);
    args.src_zero_point = zero_point_needed(ctx, kXZeroPoint) && args.x_compensation.empty();
    args.dst_zero_point = !zy;
    if (args.src_zero_point) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
    if (args.dst_zero_point) attr.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});
    dnnl::post_ops ops;
    if (ctx.has_input(kMultiplier)) ops.append_binary(alg::binary_mul, scalar);
    std::map<alg, std::pair<float, float>> eltwise;  // the parameters each algorithm has
    // An eltwise post-op, if its algorithm is free or has these parameters.
    auto try_eltwise = [&](alg a, float alpha, float beta) {
      const auto it = eltwise.find(a);
      if (it != eltwise.end() && it->second != std::pair{alpha, beta}) return false;
      eltwise[a] = {alpha, beta};
      ops.append_eltwise(1.0f, a, alpha, beta);
      return true;
    };
    auto with_constant = [&](alg a, float v) {
      args.constants.push_back({ops.len(), v});
      ops.append_binary(a, scalar);
    };
    for (size_t i = first; i < steps.size(); ++i) {
      const Step& st = steps[i];
      switch (st.kind) {
        case Step::Kind::Linear:
          if (try_eltwise(alg::eltwise_linear, st.a, st.b)) break;
          if (st.a != 1.0f) with_constant(alg::binary_mul, st.a);
          if (st.b != 0.0f) with_constant(alg::binary_add, st.b);
          break;
        case Step::Kind::AddResidual:
          if (!residual) throw KernelUnsupported{"no residual"};
          if (residual_in_dst) {
            ops.append_sum(st.a, static_cast<int32_t>(st.b), residual->data_type());
            break;
          }
          args.residual = ops.len();
          ops.append_binary(alg::binary_add, *residual);
          break;
        case Step::Kind::Activate: {
          dnnl::post_ops one;
          st.act.append_to(one);
          for (int k = 0; k < one.len(); ++k) {
            if (one.kind(k) != dnnl::primitive::kind::eltwise) {
              throw KernelUnsupported{"an activation of several kinds of post-ops"};
            }
            float scale, alpha, beta;
            alg a;
            one.get_params_eltwise(k, scale, a, alpha, beta);
            if (!try_eltwise(a, alpha, beta))
              throw KernelUnsupported{"two activations of one kind with other parameters"};
          }
          break;
        }
      }
    }
    attr.set_post_ops(ops);
    return attr;
  }

  // The multiplier of this run (1 without one).
  float multiplier(const RunContext& ctx) const {
    return ctx.has_input(kMultiplier) ? ctx.input(kMultiplier).data<float>()[0] : 1.0f;
  }

  // Whether the primitive can compute this run: a multiplier of zero (a dynamic quantizer's
  // scale for an input of zeros) or one that is not finite leaves no bias in the accumulator's
  // units; the reference loop computes those runs.
  bool primitive_can_run(const RunContext& ctx) const {
    const float m = multiplier(ctx);
    return !ctx.has_input(kBias) || (m != 0 && std::isfinite(m));
  }

  // Whether the primitive takes a bias: B, or X's zero point's compensation.
  static bool with_bias(const InferContext& ctx, const PrimitiveArgs& args) {
    return ctx.has_input(kBias) || !args.x_compensation.empty();
  }

  // The primitive's bias for this run, into `out` (M floats, accumulator units): B / (scale ·
  // multiplier), minus X's zero point's compensation.
  void bias_for_run(const RunContext& ctx, const PrimitiveArgs& args, float* out) const {
    const std::vector<float>& comp = args.x_compensation;
    const int64_t n =
        ctx.has_input(kBias) ? ctx.input(kBias).numel() : static_cast<int64_t>(comp.size());
    for (int64_t c = 0; c < n; ++c) {
      float v = 0;
      if (ctx.has_input(kBias))
        v = ctx.input(kBias).data<float>()[c] /
            (scales_[scales_.size() > 1 ? static_cast<size_t>(c) : 0] * multiplier(ctx));
      out[c] = comp.empty() ? v : v - comp[static_cast<size_t>(c)];
    }
  }

  // The run-time arguments: zero points (as s32, in `zps`, which must outlive the call),
  // multiplier, bias (`bias`: M floats of scratch).
  void add_runtime_args(const RunContext& ctx, dnnl_adapter::Args& args,
                        const dnnl::memory::desc& scalar, const dnnl::memory::desc& bias_md,
                        float* bias, int32_t (&zps)[2], const PrimitiveArgs& post,
                        const dnnl::memory::desc* residual_md = nullptr,
                        const void* residual = nullptr) const {
    static const dnnl::memory::desc one_s32({1}, dnnl::memory::data_type::s32,
                                            dnnl::memory::format_tag::x);
    if (post.src_zero_point) {
      zps[0] = static_cast<int32_t>(value_at(ctx.input(kXZeroPoint), 0));
      args.add(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, one_s32, &zps[0]);
    }
    if (post.dst_zero_point) {
      zps[1] = static_cast<int32_t>(value_at(ctx.input(kYZeroPoint), 0));
      args.add(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, one_s32, &zps[1]);
    }
    if (ctx.has_input(kMultiplier))
      args.add(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, scalar,
               ctx.input(kMultiplier).raw());
    if (residual_md && post.residual >= 0)
      args.add(DNNL_ARG_ATTR_MULTIPLE_POST_OP(post.residual) | DNNL_ARG_SRC_1, *residual_md,
               residual);
    for (const auto& [index, value] : post.constants)
      args.add(DNNL_ARG_ATTR_MULTIPLE_POST_OP(index) | DNNL_ARG_SRC_1, scalar, &value);
    if (ctx.has_input(kBias) || !post.x_compensation.empty()) {
      bias_for_run(ctx, post, bias);
      args.add(DNNL_ARG_BIAS, bias_md, bias);
    }
  }

  // The reference: Y from the exact accumulators (N x M x inner, channel m at (e / inner) % M).
  void finish_reference(RunContext& ctx, const Tensor& acc, Tensor& y, int64_t m, int64_t inner,
                        const Tensor* residual = nullptr) const {
    if (out_type_ == DType::Int32) {
      std::memcpy(y.raw(), acc.raw(), acc.nbytes());
      return;
    }
    const float mult =
        ctx.has_input(kMultiplier) ? static_cast<float>(value_at(ctx.input(kMultiplier), 0)) : 1.0f;
    const Tensor* bias = ctx.has_input(kBias) ? &ctx.input(kBias) : nullptr;
    Tensor v = out_type_ == DType::Float ? y : allocate_tensor(DType::Float, y.shape());
    float* pv = v.data<float>();
    const int32_t* pa = acc.data<int32_t>();
    for (int64_t e = 0; e < acc.numel(); ++e) {
      const int64_t c = (e / inner) % m;
      const float s = scales_[scales_.size() > 1 ? static_cast<size_t>(c) : 0];
      float x = static_cast<float>(pa[e]) * s * mult +
                (bias ? static_cast<float>(value_at(*bias, c)) : 0.0f);
      for (const Step& st : steps_) switch (st.kind) {
          case Step::Kind::Linear:
            x = st.a * x + st.b;
            break;
          case Step::Kind::AddResidual:
            x += st.a * (static_cast<float>(value_at(*residual, e)) - st.b);
            break;
          case Step::Kind::Activate:
            x = st.act.apply(x);
            break;
        }
      pv[e] = x;
    }
    if (out_type_ == DType::Float) return;
    const double zp = ctx.has_input(kYZeroPoint) ? value_at(ctx.input(kYZeroPoint), 0) : 0;
    for (int64_t e = 0; e < v.numel(); ++e)
      store_integer(y, e, saturate(std::nearbyint(pv[e]) + zp, out_type_));
  }

  std::vector<float> scales_;
  DType out_type_;
  std::vector<Step> steps_;
};

// --- convolution ----------------------------------------------------------------------------

// `t` broadcast to `shape`, for the reference loop.
Tensor broadcast_copy(const Tensor& t, const Shape& shape) {
  Tensor out = allocate_tensor(t.dtype(), shape);
  const size_t bytes = dtype_size(t.dtype());
  const BroadcastIterator it(shape, {strides_of(shape), broadcast_strides(t.shape(), shape)});
  const char* src = static_cast<const char*>(t.raw());
  char* dst = static_cast<char*>(out.raw());
  it.for_each_row([&](const int64_t* off, int64_t n, const int64_t* step) {
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(dst + (off[0] + i * step[0]) * bytes, src + (off[1] + i * step[1]) * bytes,
                  bytes);
  });
  return out;
}

struct QConvState {
  dnnl::convolution_forward prim;
  dnnl::memory::desc weights, scratch, scalar, bias, residual;
  dnnl_adapter::Staged src, dst;  // the graph's layouts <-> the primitive's
  bool has_residual = false;
  bool residual_in_dst = false;  // added by the sum post-op: copied into Y before the run
  size_t residual_offset = 0;    // else a copy of it, when Y took its buffer
  size_t x_offset = 0;  // a copy of X when Y took the residual's buffer and X is the residual
  PrimitiveArgs post;
  size_t bias_offset = 0;
  Tensor packed_weights;
};

class QuantizedConv final : public Kernel, QuantizedLinear {
 public:
  explicit QuantizedConv(const Node& n)
      : QuantizedLinear(n),
        attrs_(n),
        group_(n.attr_int("group", 1)),
        layout_(stored_layout(n)),
        x_layout_(stored_input_layout(n)) {}

  void infer(InferContext& ctx) const override {
    const Shape x =
        logical_shape(ctx.shape(kX), x_layout_ != StoredLayout::ChannelsFirst, ctx.node());
    const ConvShapes s = conv_shapes(attrs_, group_, x, ctx.shape(kW), ctx.node());
    check(ctx, s.m);
    const Shape stored = layout_ != StoredLayout::ChannelsFirst ? to_channels_last(s.out) : s.out;
    bool broadcast_residual = false;
    if (ctx.has_input(kResidual)) {
      const DType r = ctx.dtype(kResidual);
      if (r != DType::Float && r != DType::UInt8 && r != DType::Int8)
        ctx.error("the residual must be float, uint8 or int8");
      broadcast_residual = ctx.shape(kResidual) != stored;
      if (broadcast_residual &&
          broadcast_shapes({stored, ctx.shape(kResidual)}, ctx.node()) != stored)
        ctx.error("the residual " + shape_str(ctx.shape(kResidual)) +
                  " does not broadcast to Y's " + shape_str(stored));
    }
    ctx.set_output(0, out_type_,
                   layout_ != StoredLayout::ChannelsFirst ? to_channels_last(s.out) : s.out);
    if (numel_of(s.out) == 0) return;
    if (!int8_dot_is_exact(ctx))
      return ctx.runs_reference_loop("no VNNI on this CPU, and weights beyond 7 bits");
    if (s.win.in.size() > 3) return ctx.runs_reference_loop("more than 3 spatial axes");
    if (!ctx.input_tensor(kW)) return ctx.runs_reference_loop("weights computed at run time");
    if (broadcast_residual) return ctx.runs_reference_loop("a broadcast residual");
    try {
      ctx.set_state(prepare(ctx, s, x));
    } catch (const KernelUnsupported& u) {
      ctx.runs_reference_loop(u.reason);
    }
  }

  void run(RunContext& ctx) const override {
    const auto* st = static_cast<const QConvState*>(ctx.state_ptr());
    if (st && primitive_can_run(ctx)) return run_dnnl(*st, ctx);
    // Channels-last values: the reference loop on channels-first copies.
    const Tensor x = x_layout_ == StoredLayout::ChannelsFirst
                         ? ctx.input(kX)
                         : channels_first_copy(ctx.input(kX), x_layout_);
    const ConvShapes s = conv_shapes(attrs_, group_, x.shape(), ctx.input(kW).shape(), ctx.node());
    const int64_t xzp =
        ctx.has_input(kXZeroPoint) ? static_cast<int64_t>(value_at(ctx.input(kXZeroPoint), 0)) : 0;
    const Tensor acc = integer_conv(s, x, xzp, ctx.input(kW), nullptr);
    Tensor residual;
    if (ctx.has_input(kResidual)) {
      residual = layout_ == StoredLayout::ChannelsFirst
                     ? ctx.input(kResidual)
                     : channels_first_copy(ctx.input(kResidual), layout_);
      if (residual.shape() != s.out) residual = broadcast_copy(residual, s.out);
    }
    const Tensor* r = residual.defined() ? &residual : nullptr;
    if (layout_ == StoredLayout::ChannelsFirst)
      return finish_reference(ctx, acc, ctx.output(0), s.m, numel_of(s.win.out), r);
    Tensor y = allocate_tensor(out_type_, s.out);
    finish_reference(ctx, acc, y, s.m, numel_of(s.win.out), r);
    write_stored(y, layout_, ctx.output(0));
  }

 private:
  std::shared_ptr<QConvState> prepare(InferContext& ctx, const ConvShapes& s,
                                      const Shape& x) const {
    return dnnl_adapter::guarded(ctx.node(), [&] {
      using dims = dnnl::memory::dims;
      using tag = dnnl::memory::format_tag;
      auto st = std::make_shared<QConvState>();
      const auto x_dt = dnnl_adapter::to_dnnl(ctx.dtype(kX)),
                 y_dt = dnnl_adapter::to_dnnl(out_type_);
      const Shape& ws = ctx.shape(kW);
      Shape wshape = ws;
      if (s.group > 1) {
        wshape = {s.group, s.m / s.group};
        wshape.insert(wshape.end(), ws.begin() + 1, ws.end());
      }
      const dnnl::memory::desc plain_src = activation_md(x, x_dt, x_layout_),
                               plain_dst = activation_md(s.out, y_dt, layout_);
      // oneDNN's int8 kernels want channels-last activations: it picks them, reorders stage them.
      const dnnl::memory::desc src_any(dims(x.begin(), x.end()), x_dt, tag::any),
          dst_any(dims(s.out.begin(), s.out.end()), y_dt, tag::any),
          w_any(dims(wshape.begin(), wshape.end()), dnnl::memory::data_type::s8, tag::any);
      st->scalar = dnnl_adapter::plain_md(Shape(s.out.size(), 1), dnnl::memory::data_type::f32);
      dims strides(s.win.strides.begin(), s.win.strides.end()),
          pl(s.win.pad_begin.begin(), s.win.pad_begin.end()),
          pr(s.win.pad_end.begin(), s.win.pad_end.end()), dil;
      for (int64_t d : s.win.dilations) dil.push_back(d - 1);
      st->has_residual = ctx.has_input(kResidual);
      if (st->has_residual)
        st->residual = activation_md(s.out, dnnl_adapter::to_dnnl(ctx.dtype(kResidual)), layout_);
      st->bias = dnnl_adapter::plain_md({s.m}, dnnl::memory::data_type::f32);
      // X's zero point into the bias where no padding reads it.
      bool padded = false;
      for (size_t i = 0; i < s.win.pad_begin.size(); ++i)
        padded |= s.win.pad_begin[i] != 0 || s.win.pad_end[i] != 0;
      // (Not for int32 results, exact in the primitive's integers, not in a float bias.)
      if (!padded && out_type_ != DType::Int32)
        st->post.x_compensation = x_compensation(ctx, *ctx.input_tensor(kW), true);
      const bool bias = with_bias(ctx, st->post);
      auto make_pd = [&](const dnnl::primitive_attr& attr, const dnnl::memory::desc& dst_md) {
        const auto alg = dnnl::algorithm::convolution_direct;
        const auto prop = dnnl::prop_kind::forward_inference;
        const dnnl::convolution_forward::desc d =
            bias ? dnnl::convolution_forward::desc(prop, alg, src_any, w_any, st->bias, dst_md,
                                                   strides, dil, pl, pr)
                 : dnnl::convolution_forward::desc(prop, alg, src_any, w_any, dst_md, strides, dil,
                                                   pl, pr);
        dnnl::convolution_forward::primitive_desc pd(d, attr, dnnl_adapter::engine());
        // AMX tiles reduce over 64 int8 channels at a time; with fewer input channels per group
        // most of each tile is padding, and oneDNN's VNNI kernels are faster (MobileNetV2's
        // 16->96 expansion at 112x112: 0.9 ms on AMX). oneDNN lists its implementations best
        // first: take the first that is not AMX there.
        if (s.c / s.group < 64 &&
            std::string(pd.impl_info_str()).find("amx") != std::string::npos) {
          dnnl::convolution_forward::primitive_desc other(d, attr, dnnl_adapter::engine());
          while (other.next_impl()) {
            const std::string name = other.impl_info_str();
            if (name.find("amx") == std::string::npos) {
              if (name.rfind("ref", 0) != 0) pd = other;
              break;
            }
          }
        }
        return pd;
      };
      // A residual of Y's type: the sum post-op, Y in the graph's layout (the residual's).
      std::optional<dnnl::convolution_forward::primitive_desc> chosen;
      if (st->has_residual && ctx.dtype(kResidual) == out_type_) {
        PrimitiveArgs post;
        post.x_compensation = st->post.x_compensation;
        auto pd =
            make_pd(primitive_attr(ctx, st->scalar, 1 << 1, post, &st->residual, true), plain_dst);
        if (!dnnl_adapter::is_reference(pd)) {
          chosen = pd;
          st->post = post;
          st->residual_in_dst = true;
        }
      }
      if (!chosen)
        chosen = make_pd(primitive_attr(ctx, st->scalar, 1 << 1, st->post,
                                        st->has_residual ? &st->residual : nullptr),
                         dst_any);
      const dnnl::convolution_forward::primitive_desc& pd = *chosen;
      if (dnnl_adapter::is_reference(pd))
        throw KernelUnsupported{std::string("oneDNN ") + pd.impl_info_str()};
      st->prim = dnnl::convolution_forward(pd);
      st->weights = pd.weights_desc();
      st->scratch = pd.scratchpad_desc();
      size_t total = st->scratch.get_size();
      st->src = dnnl_adapter::Staged(plain_src, pd.src_desc(), true, total);
      st->dst = dnnl_adapter::Staged(plain_dst, pd.dst_desc(), false, total);
      st->bias_offset = dnnl_adapter::align64(total);
      total = st->bias_offset + st->bias.get_size();
      if (st->has_residual && !st->residual_in_dst) {
        st->residual_offset = dnnl_adapter::align64(total);
        total = st->residual_offset + st->residual.get_size();
      }
      if (st->has_residual && !st->src.needed) {
        st->x_offset = dnnl_adapter::align64(total);
        total = st->x_offset + plain_src.get_size();
      }
      st->packed_weights = dnnl_adapter::pack_constant(
          ctx, kW, *ctx.input_tensor(kW),
          dnnl_adapter::plain_md(wshape, dnnl::memory::data_type::s8), st->weights);
      ctx.request_scratch(total);
      return st;
    });
  }

  void run_dnnl(const QConvState& st, RunContext& ctx) const {
    char* scratch = static_cast<char*>(ctx.scratch());
    void* y = ctx.output(0).raw();
    // Conv(x) + x: Y may have taken the buffer of the residual, which is X; X is read from a copy
    // (a staged X is one already).
    const void* x = ctx.input(kX).raw();
    if (x == y && !st.src.needed) {
      std::memcpy(scratch + st.x_offset, x, ctx.input(kX).nbytes());
      x = scratch + st.x_offset;
    }
    dnnl_adapter::Args args = {{DNNL_ARG_SRC, st.src.wanted, st.src.in(x, scratch)},
                               {DNNL_ARG_DST, st.dst.wanted, st.dst.out(y, scratch)},
                               {DNNL_ARG_WEIGHTS, st.weights, st.packed_weights.raw()}};
    // The residual: in Y for the sum post-op (already there when Y took its buffer); for the
    // binary post-op, read from a copy when Y took its buffer, which the primitive overwrites.
    const void* residual = st.has_residual ? ctx.input(kResidual).raw() : nullptr;
    const size_t residual_bytes = st.has_residual ? ctx.input(kResidual).nbytes() : 0;
    if (st.residual_in_dst && residual != y) std::memcpy(y, residual, residual_bytes);
    if (st.has_residual && !st.residual_in_dst && residual == y) {
      std::memcpy(scratch + st.residual_offset, residual, residual_bytes);
      residual = scratch + st.residual_offset;
    }
    int32_t zps[2] = {0, 0};
    add_runtime_args(ctx, args, st.scalar, st.bias,
                     reinterpret_cast<float*>(scratch + st.bias_offset), zps, st.post,
                     st.has_residual ? &st.residual : nullptr, residual);
    dnnl_adapter::execute(st.prim, args, st.scratch, scratch);
    st.dst.finish(y, scratch);
  }

  WindowAttributes attrs_;
  int64_t group_;
  StoredLayout layout_;    // of Y (volt.layout, from the channels_last pass)
  StoredLayout x_layout_;  // of X
};

// --- matrix product -------------------------------------------------------------------------

struct QMatMulState {
  dnnl::matmul prim;
  dnnl::memory::desc a, b, out, scratch, scalar, bias;
  PrimitiveArgs post;
  size_t bias_offset = 0;
  Tensor packed_b;
};

// X [..., K] x W [K, N]: X's leading axes are rows of one 2-D product.
class QuantizedMatMul final : public Kernel, QuantizedLinear {
 public:
  explicit QuantizedMatMul(const Node& n) : QuantizedLinear(n) {}

  void infer(InferContext& ctx) const override {
    const Shape &x = ctx.shape(kX), &w = ctx.shape(kW);
    if (w.size() != 2) ctx.error("W must be 2-D");
    const MatMulShapes s = matmul_shapes(x, w, ctx.node());
    check(ctx, s.n);
    ctx.set_output(0, out_type_, s.result);
    if (numel_of(s.result) == 0) return;
    if (!int8_dot_is_exact(ctx))
      return ctx.runs_reference_loop("no VNNI on this CPU, and weights beyond 7 bits");
    if (!ctx.input_tensor(kW)) return ctx.runs_reference_loop("weights computed at run time");
    try {
      ctx.set_state(prepare(ctx, numel_of(x) / s.k, s.k, s.n));
    } catch (const KernelUnsupported& u) {
      ctx.runs_reference_loop(u.reason);
    }
  }

  void run(RunContext& ctx) const override {
    const auto* st = static_cast<const QMatMulState*>(ctx.state_ptr());
    if (st && primitive_can_run(ctx)) return run_dnnl(*st, ctx);
    const Tensor &x = ctx.input(kX), &w = ctx.input(kW);
    const MatMulShapes s = matmul_shapes(x.shape(), w.shape(), ctx.node());
    const Tensor* xzp = ctx.has_input(kXZeroPoint) ? &ctx.input(kXZeroPoint) : nullptr;
    const std::vector<int64_t> acc64 = integer_matmul(x, w, xzp, nullptr, s);
    Tensor acc = allocate_tensor(DType::Int32, s.result);
    for (size_t i = 0; i < acc64.size(); ++i)
      acc.data<int32_t>()[i] = static_cast<int32_t>(acc64[i]);
    finish_reference(ctx, acc, ctx.output(0), s.n, 1);
  }

 private:
  std::shared_ptr<QMatMulState> prepare(InferContext& ctx, int64_t rows, int64_t k,
                                        int64_t n) const {
    return dnnl_adapter::guarded(ctx.node(), [&] {
      using dt = dnnl::memory::data_type;
      auto st = std::make_shared<QMatMulState>();
      st->a = dnnl_adapter::plain_md({rows, k}, dnnl_adapter::to_dnnl(ctx.dtype(kX)));
      st->out = dnnl_adapter::plain_md({rows, n}, dnnl_adapter::to_dnnl(out_type_));
      st->scalar = dnnl_adapter::plain_md({1, 1}, dt::f32);
      const dnnl::memory::desc b_any({k, n}, dt::s8, dnnl::memory::format_tag::any);
      if (out_type_ != DType::Int32)
        st->post.x_compensation = x_compensation(ctx, *ctx.input_tensor(kW), false);
      const dnnl::primitive_attr attr = primitive_attr(ctx, st->scalar, 1 << 1, st->post);
      st->bias = dnnl_adapter::plain_md({1, n}, dt::f32);
      const dnnl::matmul::desc d = with_bias(ctx, st->post)
                                       ? dnnl::matmul::desc(st->a, b_any, st->bias, st->out)
                                       : dnnl::matmul::desc(st->a, b_any, st->out);
      const dnnl::matmul::primitive_desc pd(d, attr, dnnl_adapter::engine());
      if (dnnl_adapter::is_reference(pd))
        throw KernelUnsupported{std::string("oneDNN ") + pd.impl_info_str()};
      st->prim = dnnl::matmul(pd);
      st->b = pd.weights_desc();
      st->scratch = pd.scratchpad_desc();
      st->packed_b = dnnl_adapter::pack_constant(ctx, kW, *ctx.input_tensor(kW),
                                                 dnnl_adapter::plain_md({k, n}, dt::s8), st->b);
      st->bias_offset = dnnl_adapter::align64(st->scratch.get_size());
      ctx.request_scratch(st->bias_offset + dnnl_adapter::align64(st->bias.get_size()));
      return st;
    });
  }

  void run_dnnl(const QMatMulState& st, RunContext& ctx) const {
    dnnl_adapter::Args args = {{DNNL_ARG_SRC, st.a, ctx.input(kX).raw()},
                               {DNNL_ARG_WEIGHTS, st.b, st.packed_b.raw()},
                               {DNNL_ARG_DST, st.out, ctx.output(0).raw()}};
    int32_t zps[2] = {0, 0};
    char* scratch = static_cast<char*>(ctx.scratch());
    add_runtime_args(ctx, args, st.scalar, st.bias,
                     reinterpret_cast<float*>(scratch + st.bias_offset), zps, st.post);
    dnnl_adapter::execute(st.prim, args, st.scratch, scratch);
  }
};

}  // namespace

// Y may take the residual's buffer when the residual dies here: the sum post-op then finds it in
// Y with no copy.
VOLT_REGISTER_KERNEL(quantized_conv, {.domain = kVoltDomain,
                                      .op = "QuantizedConv",
                                      .inplace_input = kResidual,
                                      .create = make_kernel<QuantizedConv>});
VOLT_REGISTER_KERNEL(quantized_matmul,
                     volt_kernel("QuantizedMatMul", make_kernel<QuantizedMatMul>));

}  // namespace volt
