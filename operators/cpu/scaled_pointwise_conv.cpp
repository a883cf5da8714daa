// ScaledPointwiseConv (ai.volt): a 1×1 convolution of X scaled per image and channel by S, as
// the fold_channel_scale_into_conv pass makes it of Mul(X, S) -> Conv: the squeeze-and-excitation
// gate of EfficientNet, MobileNetV3 and RegNetY blocks followed by the block's projection. The
// Mul was a pass over the block's widest tensor (read and written) before the convolution read
// it again; here the scale goes into the weights instead:
//   Y[n] = (X[n] * S[n]) · Wᵀ = X[n] · (diag(S[n]) · Wᵀ),
// one [E, M] weight matrix per image, made each run (E·M products against the Mul's 2·E·H·W
// values moved). On small images (H·W below max(4·M, 512)) scaling the weights costs more than
// scaling X, so X is scaled into the scratch (what the Mul did) and the weights stay packed,
// once per session (pack_constant).
//
// Inputs: X [N, H, W, E] (channels-last), S [N, 1, 1, E], W [M, E, 1, 1] and B [M] (constant;
// B optional), R [N, H, W, M] (the residual added before the activation: optional; Y may be
// written over it). Attribute volt.activation (and volt.alpha, volt.beta): any a Conv takes as
// post-op. Output Y [N, H, W, M]. oneDNN's 1×1 convolution on channels-last data, the one an
// unfused Conv runs (its matmul ran 1.5-2x slower on these shapes); the per-image weights come
// out of a reorder into the convolution's layout that applies S as its per-input-channel scales.
#include <algorithm>
#include <cstring>

#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/fused_activation.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/simd_clones.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

enum Input : size_t { kX, kS, kW, kB, kR };

struct ScaledPointwiseState {
  int64_t n = 0, pixels = 0, e = 0, m = 0;
  bool scale_weights = false;  // per image: weights scaled, one convolution each; else X scaled
  dnnl::convolution_forward conv;
  dnnl::memory::desc src, weights, bias, dst, scratch;
  dnnl::reorder scaled_reorder;  // W into `weights`, times S[n] per input channel
  dnnl::memory::desc plain_weights, scales;
  Tensor w;       // W as the model holds it, where the weights are scaled
  Tensor packed;  // W in `weights` (shared by the session's plans), where X is scaled instead
  Tensor b;
  size_t staged_bytes = 0;  // the scaled weights or X, at the start of the scratch
};

// X scaled: each pixel's E channels times its image's scales.
VOLT_SIMD_CLONES void scale_channels(const float* from, const float* scales, int64_t width,
                                     float* to) {
  for (int64_t i = 0; i < width; ++i) to[i] = from[i] * scales[i];
}

class ScaledPointwiseConv final : public Kernel {
 public:
  explicit ScaledPointwiseConv(const Node& n) : act_(FusedActivation::of(n)) {}

  void infer(InferContext& ctx) const override {
    const Node& node = ctx.node();
    for (size_t i = 0; i < ctx.input_count(); ++i)
      if (ctx.has_input(i)) {
        VOLT_CHECK(ctx.dtype(i) == DType::Float, InvalidModel,
                   node.describe() + ": every input must be float");
        VOLT_CHECK(i == kX || i == kS || i == kR || ctx.input_tensor(i), InvalidModel,
                   node.describe() + ": the weights and the bias must be constants");
      }
    VOLT_CHECK(ctx.has_input(kX) && ctx.has_input(kS) && ctx.has_input(kW), InvalidModel,
               node.describe() + ": X, S and W are required");
    const Shape& x = ctx.shape(kX);
    const Shape& w = ctx.shape(kW);
    VOLT_CHECK(x.size() == 4, InvalidArgument,
               node.describe() + ": X must be N x H x W x E, got " + shape_str(x));
    VOLT_CHECK(w.size() == 4 && w[1] == x[3] && w[2] == 1 && w[3] == 1, InvalidModel,
               node.describe() + ": W must be [M, " + std::to_string(x[3]) + ", 1, 1], got " +
                   shape_str(w));
    const Shape s = {x[0], 1, 1, x[3]};
    VOLT_CHECK(ctx.shape(kS) == s, InvalidArgument,
               node.describe() + ": S must be " + shape_str(s) + " (a scale per image and " +
                   "channel), got " + shape_str(ctx.shape(kS)));
    if (ctx.has_input(kB))
      VOLT_CHECK(ctx.shape(kB) == Shape{w[0]}, InvalidModel,
                 node.describe() + ": B must be [" + std::to_string(w[0]) + "]");
    const Shape y = {x[0], x[1], x[2], w[0]};
    if (ctx.has_input(kR))
      VOLT_CHECK(ctx.shape(kR) == y, InvalidArgument,
                 node.describe() + ": the residual must have the output's shape " + shape_str(y) +
                     ", got " + shape_str(ctx.shape(kR)));
    ctx.set_output(0, DType::Float, y);
    ctx.set_state(prepare(ctx, x, w[0]));
  }

  void run(RunContext& ctx) const override {
    const auto& st = ctx.state<ScaledPointwiseState>();
    if (st.n * st.pixels * st.m == 0) return;
    const float* x = ctx.input(kX).data<float>();
    const float* s = ctx.input(kS).data<float>();
    float* y = ctx.output(0).data<float>();
    char* scratch = static_cast<char*>(ctx.scratch());
    float* staged = reinterpret_cast<float*>(scratch);
    if (ctx.has_input(kR) && ctx.input(kR).raw() != y)  // the sum post-op adds to what Y holds
      std::memcpy(y, ctx.input(kR).raw(), ctx.output(0).nbytes());
    auto convolve = [&](const void* src, const void* weights, void* dst) {
      dnnl_adapter::Args args = {{DNNL_ARG_SRC, st.src, src},
                                 {DNNL_ARG_WEIGHTS, st.weights, weights},
                                 {DNNL_ARG_DST, st.dst, dst}};
      if (st.b.defined()) args.add(DNNL_ARG_BIAS, st.bias, st.b.raw());
      dnnl_adapter::execute(st.conv, args, st.scratch, scratch + st.staged_bytes);
    };
    if (st.scale_weights) {
      for (int64_t image = 0; image < st.n; ++image) {
        dnnl_adapter::execute(st.scaled_reorder,
                              {{DNNL_ARG_FROM, st.plain_weights, st.w.raw()},
                               {DNNL_ARG_TO, st.weights, staged},
                               {DNNL_ARG_ATTR_OUTPUT_SCALES, st.scales, s + image * st.e}});
        convolve(x + image * st.pixels * st.e, staged, y + image * st.pixels * st.m);
      }
      return;
    }
    parallel_for(st.n * st.pixels, st.n * st.pixels * st.e > 65536, [&](int64_t pixel) {
      scale_channels(x + pixel * st.e, s + pixel / st.pixels * st.e, st.e, staged + pixel * st.e);
    });
    convolve(staged, st.packed.raw(), y);
  }

 private:
  std::shared_ptr<ScaledPointwiseState> prepare(InferContext& ctx, const Shape& x,
                                                int64_t m) const {
    auto st = std::make_shared<ScaledPointwiseState>();
    st->n = x[0];
    st->pixels = x[1] * x[2];
    st->e = x[3];
    st->m = m;
    if (st->n * st->pixels * st->m == 0) return st;
    // Scaling the weights costs E·M products an image and a convolution of its own, scaling X
    // E·H·W values read and written: per node the weights won from about 4·M pixels up
    // (EfficientNet-B0 batch 1, 784 pixels, M = 40: 131 -> 96 us with the Mul) and lost below
    // (196 pixels, M = 80: 138 -> 160), and at batch 8 an image of 196 pixels was too little work
    // for a convolution of its own (MobileNetV3-Small, E = 240, M = 40: 323 -> 555 us).
    st->scale_weights = st->pixels >= std::max<int64_t>(4 * m, 512);
    if (ctx.has_input(kB)) st->b = *ctx.input_tensor(kB);
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const int64_t images = st->scale_weights ? 1 : st->n;
    dnnl_adapter::guarded(ctx.node(), [&] {
      st->src = dnnl::memory::desc({images, st->e, x[1], x[2]}, dt::f32, tag::nhwc);
      st->dst = dnnl::memory::desc({images, m, x[1], x[2]}, dt::f32, tag::nhwc);
      st->plain_weights = dnnl::memory::desc({m, st->e, 1, 1}, dt::f32, tag::oihw);
      const dnnl::memory::desc any_weights({m, st->e, 1, 1}, dt::f32, tag::any);
      if (st->b.defined()) st->bias = dnnl::memory::desc({m}, dt::f32, tag::a);
      dnnl::primitive_attr attr = dnnl_adapter::scratch_attr();
      dnnl::post_ops ops;
      if (ctx.has_input(kR)) ops.append_sum(1.0f);
      act_.append_to(ops);
      attr.set_post_ops(ops);
      const auto kind = dnnl::prop_kind::forward_inference;
      const auto alg = dnnl::algorithm::convolution_direct;
      const dnnl::memory::dims ones = {1, 1}, zeros = {0, 0};
      const auto d =
          st->b.defined()
              ? dnnl::convolution_forward::desc(kind, alg, st->src, any_weights, st->bias, st->dst,
                                                ones, zeros, zeros, zeros)
              : dnnl::convolution_forward::desc(kind, alg, st->src, any_weights, st->dst, ones,
                                                zeros, zeros, zeros);
      const dnnl::convolution_forward::primitive_desc pd(d, attr, dnnl_adapter::engine());
      if (dnnl_adapter::is_reference(pd))
        ctx.runs_reference_loop(std::string("oneDNN ") + pd.impl_info_str());
      st->conv = dnnl::convolution_forward(pd);
      st->weights = pd.weights_desc();
      st->scratch = pd.scratchpad_desc();
      if (st->scale_weights) {
        st->w = *ctx.input_tensor(kW);
        dnnl::primitive_attr scaled;
        scaled.set_output_scales(1 << 1, {DNNL_RUNTIME_F32_VAL});  // per input channel
        st->scales = dnnl::memory::desc({st->e}, dt::f32, tag::a);
        auto rpd = dnnl::reorder::primitive_desc(dnnl_adapter::engine(), st->plain_weights,
                                                 dnnl_adapter::engine(), st->weights, scaled);
        st->scaled_reorder = dnnl::reorder(rpd);
      } else {
        st->packed = dnnl_adapter::pack_constant(ctx, kW, *ctx.input_tensor(kW), st->plain_weights,
                                                 st->weights);
      }
      return 0;
    });
    st->staged_bytes = dnnl_adapter::align64(
        st->scale_weights ? st->weights.get_size()
                          : static_cast<size_t>(st->n * st->pixels * st->e) * sizeof(float));
    ctx.request_scratch(st->staged_bytes + st->scratch.get_size());
    return st;
  }

  FusedActivation act_;
};

}  // namespace

// Y may be written over the residual (input 4) when it dies here, as for Conv.
VOLT_REGISTER_KERNEL(scaled_pointwise_conv, KernelDef{.domain = kVoltDomain,
                                                      .op = "ScaledPointwiseConv",
                                                      .inplace_input = 4,
                                                      .create = make_kernel<ScaledPointwiseConv>});

}  // namespace volt
