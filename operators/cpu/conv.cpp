// Conv: oneDNN convolution for f32/bf16 (weights reordered once per plan into the blocked
// layout the primitive picks), and a direct N-d reference loop for every float type.
#include "operators/common/dispatch.hpp"
#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/cpu/conv_reference.hpp"
#include "operators/registry.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

struct ConvState {
  dnnl::convolution_forward prim;
  dnnl::memory::desc src, weights, bias, dst, scratch, user_weights;
  Tensor packed_weights;
  bool has_bias = false;
};

class Conv final : public Kernel {
 public:
  explicit Conv(const Node& n) : attrs_(n), group_(n.attr_int("group", 1)) {}

  void infer(InferContext& ctx) const override {
    const ConvShapes s = conv_shapes(attrs_, group_, ctx.shape(0), ctx.shape(1), ctx.node());
    VOLT_CHECK(ctx.dtype(0) == ctx.dtype(1), InvalidModel,
               ctx.node().describe() + ": X and W must share one dtype");
    if (ctx.has_input(2))
      VOLT_CHECK(ctx.shape(2) == Shape{s.m}, InvalidArgument,
                 ctx.node().describe() + ": bias B must have shape [" + std::to_string(s.m) +
                     "], got " + shape_str(ctx.shape(2)));
    ctx.set_output(0, ctx.dtype(0), s.out);
    if ((ctx.dtype(0) != DType::Float && ctx.dtype(0) != DType::BFloat16) || s.win.in.size() > 3 ||
        numel_of(s.out) == 0)
      return;
    try {
      ctx.set_state(prepare(ctx, s));
    } catch (const KernelUnsupported&) {
      // reference loop
    }
  }

  void run(RunContext& ctx) const override {
    const auto* st = static_cast<const ConvState*>(ctx.state_ptr());
    if (st) {
      std::unordered_map<int, dnnl::memory> args = {
          {DNNL_ARG_SRC, dnnl_adapter::wrap(st->src, ctx.input(0).raw())},
          {DNNL_ARG_WEIGHTS,
           dnnl_adapter::wrap(st->weights,
                              st->packed_weights.defined() ? st->packed_weights.raw() : nullptr)},
          {DNNL_ARG_DST, dnnl_adapter::wrap(st->dst, ctx.output(0).raw())}};
      Tensor packed;
      if (!st->packed_weights.defined()) {  // weights computed at run time: reorder them now
        packed = allocate_tensor(DType::UInt8, {static_cast<int64_t>(st->weights.get_size())});
        dnnl::memory src = dnnl_adapter::wrap(st->user_weights, ctx.input(1).raw());
        dnnl::memory dst = dnnl_adapter::wrap(st->weights, packed.raw());
        dnnl::reorder(src, dst).execute(dnnl_adapter::stream(), src, dst);
        args[DNNL_ARG_WEIGHTS] = dst;
      }
      if (st->has_bias)
        args.emplace(DNNL_ARG_BIAS, dnnl_adapter::wrap(st->bias, ctx.input(2).raw()));
      dnnl_adapter::execute(st->prim, std::move(args), st->scratch, ctx.scratch());
      return;
    }
    const ConvShapes s =
        conv_shapes(attrs_, group_, ctx.input(0).shape(), ctx.input(1).shape(), ctx.node());
    dispatch_numeric(ctx.input(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<typename Compute<T>::type>) {
        reference_conv<T>(s, static_cast<const T*>(ctx.input(0).raw()),
                          static_cast<const T*>(ctx.input(1).raw()),
                          ctx.has_input(2) ? static_cast<const T*>(ctx.input(2).raw()) : nullptr,
                          static_cast<T*>(ctx.output(0).raw()));
      } else {
        ctx.error("Conv needs floating-point inputs");
      }
    });
  }

 private:
  std::shared_ptr<ConvState> prepare(InferContext& ctx, const ConvShapes& s) const {
    return dnnl_adapter::guarded(ctx.node(), [&] {
      using dims = dnnl::memory::dims;
      auto st = std::make_shared<ConvState>();
      const auto dt = dnnl_adapter::to_dnnl(ctx.dtype(0));
      const Shape& ws = ctx.shape(1);
      Shape wshape = ws;
      if (s.group > 1) {  // oneDNN wants grouped weights as [G, M/G, C/G, k...]
        wshape = {s.group, s.m / s.group};
        wshape.insert(wshape.end(), ws.begin() + 1, ws.end());
      }
      st->src = dnnl_adapter::plain_md(ctx.shape(0), dt);
      st->dst = dnnl_adapter::plain_md(s.out, dt);
      st->user_weights = dnnl_adapter::plain_md(wshape, dt);
      const dnnl::memory::desc w_any(dims(wshape.begin(), wshape.end()), dt,
                                     dnnl::memory::format_tag::any);
      dims strides(s.win.strides.begin(), s.win.strides.end()),
          pl(s.win.pad_begin.begin(), s.win.pad_begin.end()),
          pr(s.win.pad_end.begin(), s.win.pad_end.end()), dil;
      for (int64_t d : s.win.dilations) dil.push_back(d - 1);  // oneDNN counts dilation from 0
      std::unique_ptr<dnnl::convolution_forward::desc> d;
      if (ctx.has_input(2)) {
        st->has_bias = true;
        st->bias = dnnl_adapter::plain_md({s.m}, dt);
        d = std::make_unique<dnnl::convolution_forward::desc>(
            dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, st->src, w_any,
            st->bias, st->dst, strides, dil, pl, pr);
      } else {
        d = std::make_unique<dnnl::convolution_forward::desc>(
            dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, st->src, w_any,
            st->dst, strides, dil, pl, pr);
      }
      dnnl::convolution_forward::primitive_desc pd(*d, dnnl_adapter::scratch_attr(),
                                                   dnnl_adapter::engine());
      st->prim = dnnl::convolution_forward(pd);
      st->weights = pd.weights_desc();
      st->scratch = pd.scratchpad_desc();
      if (const Tensor* w = ctx.input_tensor(1)) {
        st->packed_weights =
            allocate_tensor(DType::UInt8, {static_cast<int64_t>(st->weights.get_size())});
        dnnl::memory src = dnnl_adapter::wrap(st->user_weights, w->raw());
        dnnl::memory dst = dnnl_adapter::wrap(st->weights, st->packed_weights.raw());
        dnnl::reorder(src, dst).execute(dnnl_adapter::stream(), src, dst);
        dnnl_adapter::stream().wait();
      }
      ctx.request_scratch(st->scratch.get_size());
      return st;
    });
  }

  WindowAttributes attrs_;
  int64_t group_;
};

}  // namespace

VOLT_REGISTER_KERNEL(conv, {.op = "Conv", .types = kFloatTypes, .create = make_kernel<Conv>});

}  // namespace volt
