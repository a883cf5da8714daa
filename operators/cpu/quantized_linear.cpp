// QuantizedConv and QuantizedMatMul (ai.volt): the one int8 path that every quantized form of a
// convolution or matrix product lowers to (runtime/passes/lower_quantized.cpp): ConvInteger,
// MatMulInteger, QLinearConv, QLinearMatMul, DequantizeLinear -> Conv/MatMul/Gemm ->
// QuantizeLinear, and float layers quantized at load (precision = int8). They run on oneDNN's
// int8 primitives (u8/s8 activations, s8 weights packed once per plan, s32 accumulation on
// VNNI/AMX) with the rescale chain as output scales and post-ops.
//
//   acc[m] = Σ (X - x_zero_point) · W             exact; W was shifted by its zero point
//   volt.output_type INT32: Y = acc
//   otherwise:  v = activation(acc · volt.scales[m] · multiplier + B[m] [+ residual])
//               FLOAT: Y = v;  UINT8 / INT8: Y = saturate(round_half_even(v) + y_zero_point)
//
// Inputs: 0 X (uint8 or int8), 1 x_zero_point (scalar, optional), 2 W (int8 constant; Conv's
// [M, C/group, k...] or MatMul's [K, N]), 3 B (float [M], optional), 4 multiplier (float scalar,
// optional, known at run time only: a dynamic quantizer's scale), 5 y_zero_point (scalar,
// optional), 6 (QuantizedConv, float Y) a residual added before the activation (a binary post-op:
// ResNet's Conv -> Add -> Relu). Attributes: Conv's, volt.scales (1 or M floats), volt.output_type
// (ONNX type code), the fused activation (volt.activation, volt.alpha, volt.beta).
//
// Where oneDNN has no int8 kernel (no VNNI on this CPU: its older kernels add pairs of u8·s8
// products in saturating 16-bit arithmetic, which is not exact; more than 3 spatial axes), a
// reference loop computes the same formula exactly.
#include <cstring>

#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/epilogue.hpp"
#include "operators/common/fused_activation.hpp"
#include "operators/common/layout.hpp"
#include "operators/common/matmul_shapes.hpp"
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
  kResidual =
      6  // QuantizedConv: a float tensor of Y's shape and layout, added before the activation
};

// Whether oneDNN's int8 kernels on this CPU accumulate exactly (VNNI's u8·s8 dot products into
// s32, or AMX tiles).
bool exact_int8_dot() {
  using isa = dnnl::cpu_isa;
  static const bool yes = [] {
    switch (dnnl::get_effective_cpu_isa()) {
      case isa::avx2_vnni:
      case isa::avx512_core_vnni:
      case isa::avx512_core_bf16:
      case isa::avx512_core_amx:
        return true;
      default:
        return false;
    }
  }();
  return yes;
}

// What QuantizedConv and QuantizedMatMul share: the attributes, their checks, the primitive's
// attributes and the run-time arguments of its post-ops and zero points.
class QuantizedLinear {
 public:
  explicit QuantizedLinear(const Node& n)
      : scales_(n.attr_floats("volt.scales", {1.0f})),
        out_type_(
            static_cast<DType>(n.attr_int("volt.output_type", static_cast<int64_t>(DType::Float)))),
        act_(FusedActivation::of(n)) {}

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
        (ctx.has_input(kBias) || ctx.has_input(kMultiplier) || act_.any()))
      ctx.error("an int32 output takes no scale, bias or activation");
    if (ctx.has_input(kYZeroPoint) && (!quantized || ctx.dtype(kYZeroPoint) != out_type_ ||
                                       numel_of(ctx.shape(kYZeroPoint)) != 1))
      ctx.error("y zero point must be one value of Y's type");
  }

  // Output scales (per channel along `channel_axis_mask`), the multiplier as a binary post-op,
  // the activation, the zero points. The bias is the primitive's own, which oneDNN adds before
  // scaling: B / (scale · multiplier), computed each run (bias_for_run) since the multiplier is
  // known only then; a per-channel binary add post-op instead made BERT's products 60% slower.
  dnnl::primitive_attr primitive_attr(const InferContext& ctx, const dnnl::memory::desc& scalar,
                                      int channel_mask,
                                      const dnnl::memory::desc* residual = nullptr) const {
    dnnl::primitive_attr attr = dnnl_adapter::scratch_attr();
    attr.set_output_scales(scales_.size() > 1 ? channel_mask : 0, scales_);
    if (ctx.has_input(kXZeroPoint)) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
    if (ctx.has_input(kYZeroPoint)) attr.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});
    dnnl::post_ops ops;
    if (ctx.has_input(kMultiplier)) ops.append_binary(dnnl::algorithm::binary_mul, scalar);
    if (residual) ops.append_binary(dnnl::algorithm::binary_add, *residual);
    act_.append_to(ops);
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

  // B in the accumulator's units for this run, into `out` (M floats).
  void bias_for_run(const RunContext& ctx, float* out) const {
    const float m = multiplier(ctx);
    const float* b = ctx.input(kBias).data<float>();
    const int64_t n = ctx.input(kBias).numel();
    for (int64_t c = 0; c < n; ++c)
      out[c] = b[c] / (scales_[scales_.size() > 1 ? static_cast<size_t>(c) : 0] * m);
  }

  // The run-time arguments: zero points (as s32, in `zps`, which must outlive the call),
  // multiplier, bias (`bias`: M floats of scratch).
  void add_runtime_args(const RunContext& ctx, std::unordered_map<int, dnnl::memory>& args,
                        const dnnl::memory::desc& scalar, const dnnl::memory::desc& bias_md,
                        float* bias, int32_t (&zps)[2],
                        const dnnl::memory::desc* residual_md = nullptr) const {
    static const dnnl::memory::desc one_s32({1}, dnnl::memory::data_type::s32,
                                            dnnl::memory::format_tag::x);
    if (ctx.has_input(kXZeroPoint)) {
      zps[0] = static_cast<int32_t>(value_at(ctx.input(kXZeroPoint), 0));
      args.emplace(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, dnnl_adapter::wrap(one_s32, &zps[0]));
    }
    if (ctx.has_input(kYZeroPoint)) {
      zps[1] = static_cast<int32_t>(value_at(ctx.input(kYZeroPoint), 0));
      args.emplace(DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, dnnl_adapter::wrap(one_s32, &zps[1]));
    }
    int post_op = 0;
    if (ctx.has_input(kMultiplier))
      args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(post_op++) | DNNL_ARG_SRC_1,
                   dnnl_adapter::wrap(scalar, ctx.input(kMultiplier).raw()));
    if (residual_md)
      args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(post_op) | DNNL_ARG_SRC_1,
                   dnnl_adapter::wrap(*residual_md, ctx.input(kResidual).raw()));
    if (ctx.has_input(kBias)) {
      bias_for_run(ctx, bias);
      args.emplace(DNNL_ARG_BIAS, dnnl_adapter::wrap(bias_md, bias));
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
      pv[e] = static_cast<float>(pa[e]) * s * mult +
              (bias ? static_cast<float>(value_at(*bias, c)) : 0.0f);
      if (residual) pv[e] += residual->data<float>()[e];
    }
    if (act_.any()) apply_epilogue(v, nullptr, act_, nullptr, ctx.node());
    if (out_type_ == DType::Float) return;
    const double zp = ctx.has_input(kYZeroPoint) ? value_at(ctx.input(kYZeroPoint), 0) : 0;
    for (int64_t e = 0; e < v.numel(); ++e)
      store_integer(y, e, saturate(std::nearbyint(pv[e]) + zp, out_type_));
  }

  std::vector<float> scales_;
  DType out_type_;
  FusedActivation act_;
};

// --- convolution ----------------------------------------------------------------------------

struct QConvState {
  dnnl::convolution_forward prim;
  dnnl::memory::desc weights, scratch, scalar, bias, residual;
  dnnl_adapter::Staged src, dst;  // the graph's layouts <-> the primitive's
  bool has_residual = false;
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
        x_layout_(n.attr_string("volt.input_layout", "") == "NCHW" ? StoredLayout::ChannelsFirst
                                                                   : layout_) {}

  void infer(InferContext& ctx) const override {
    const Shape x =
        logical_shape(ctx.shape(kX), x_layout_ != StoredLayout::ChannelsFirst, ctx.node());
    const ConvShapes s = conv_shapes(attrs_, group_, x, ctx.shape(kW), ctx.node());
    check(ctx, s.m);
    const Shape stored = layout_ != StoredLayout::ChannelsFirst ? to_channels_last(s.out) : s.out;
    if (ctx.has_input(kResidual) && (ctx.dtype(kResidual) != DType::Float ||
                                     ctx.shape(kResidual) != stored || out_type_ != DType::Float))
      ctx.error("the residual must be float, of Y's shape " + shape_str(stored) +
                ", with a float Y");
    ctx.set_output(0, out_type_,
                   layout_ != StoredLayout::ChannelsFirst ? to_channels_last(s.out) : s.out);
    if (numel_of(s.out) == 0) return;
    if (!exact_int8_dot()) return ctx.runs_reference_loop("no VNNI on this CPU");
    if (s.win.in.size() > 3) return ctx.runs_reference_loop("more than 3 spatial axes");
    if (!ctx.input_tensor(kW)) return ctx.runs_reference_loop("weights computed at run time");
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
    if (ctx.has_input(kResidual))
      residual = layout_ == StoredLayout::ChannelsFirst
                     ? ctx.input(kResidual)
                     : channels_first_copy(ctx.input(kResidual), layout_);
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
        st->residual = activation_md(s.out, dnnl::memory::data_type::f32, layout_);
      const dnnl::primitive_attr attr =
          primitive_attr(ctx, st->scalar, 1 << 1, st->has_residual ? &st->residual : nullptr);
      st->bias = dnnl_adapter::plain_md({s.m}, dnnl::memory::data_type::f32);
      const auto alg = dnnl::algorithm::convolution_direct;
      const auto prop = dnnl::prop_kind::forward_inference;
      const dnnl::convolution_forward::desc d =
          ctx.has_input(kBias)
              ? dnnl::convolution_forward::desc(prop, alg, src_any, w_any, st->bias, dst_any,
                                                strides, dil, pl, pr)
              : dnnl::convolution_forward::desc(prop, alg, src_any, w_any, dst_any, strides, dil,
                                                pl, pr);
      dnnl::convolution_forward::primitive_desc pd(d, attr, dnnl_adapter::engine());
      // AMX tiles reduce over 64 int8 channels at a time; with fewer input channels per group
      // most of each tile is padding, and oneDNN's VNNI kernels are faster (MobileNetV2's
      // 16->96 expansion at 112x112: 0.9 ms on AMX). oneDNN lists its implementations best
      // first: take the first that is not AMX there.
      if (s.c / s.group < 64 && std::string(pd.impl_info_str()).find("amx") != std::string::npos) {
        dnnl::convolution_forward::primitive_desc other(d, attr, dnnl_adapter::engine());
        while (other.next_impl()) {
          const std::string name = other.impl_info_str();
          if (name.find("amx") == std::string::npos) {
            if (name.rfind("ref", 0) != 0) pd = other;
            break;
          }
        }
      }
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
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, st.src.in(ctx.input(kX).raw(), scratch)},
        {DNNL_ARG_DST, st.dst.out(y, scratch)},
        {DNNL_ARG_WEIGHTS, dnnl_adapter::wrap(st.weights, st.packed_weights.raw())}};
    int32_t zps[2] = {0, 0};
    add_runtime_args(ctx, args, st.scalar, st.bias,
                     reinterpret_cast<float*>(scratch + st.bias_offset), zps,
                     st.has_residual ? &st.residual : nullptr);
    dnnl_adapter::execute(st.prim, std::move(args), st.scratch, scratch);
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
    if (!exact_int8_dot()) return ctx.runs_reference_loop("no VNNI on this CPU");
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
      const dnnl::primitive_attr attr = primitive_attr(ctx, st->scalar, 1 << 1);
      st->bias = dnnl_adapter::plain_md({1, n}, dt::f32);
      const dnnl::matmul::desc d = ctx.has_input(kBias)
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
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, dnnl_adapter::wrap(st.a, ctx.input(kX).raw())},
        {DNNL_ARG_WEIGHTS, dnnl_adapter::wrap(st.b, st.packed_b.raw())},
        {DNNL_ARG_DST, dnnl_adapter::wrap(st.out, ctx.output(0).raw())}};
    int32_t zps[2] = {0, 0};
    char* scratch = static_cast<char*>(ctx.scratch());
    add_runtime_args(ctx, args, st.scalar, st.bias,
                     reinterpret_cast<float*>(scratch + st.bias_offset), zps);
    dnnl_adapter::execute(st.prim, std::move(args), st.scratch, scratch);
  }
};

}  // namespace

VOLT_REGISTER_KERNEL(quantized_conv, volt_kernel("QuantizedConv", make_kernel<QuantizedConv>));
VOLT_REGISTER_KERNEL(quantized_matmul,
                     volt_kernel("QuantizedMatMul", make_kernel<QuantizedMatMul>));

}  // namespace volt
