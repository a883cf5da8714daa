// ConvTranspose: oneDNN's deconvolution for f32/bf16 up to 3 spatial axes (groups, dilations,
// output_padding, output_shape, auto_pad; a fused activation from fuse_conv_activation), its
// weights reordered once per plan; in 2-D on channels-last or blocked data, a 1x1 convolution
// and a gather of each output's taps (conv_transpose_gather.hpp); a reference scatter loop for
// every other float case.
#include "operators/common/dispatch.hpp"
#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/epilogue.hpp"
#include "operators/common/fused_activation.hpp"
#include "operators/common/layout.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/cpu/conv_transpose_gather.hpp"
#include "operators/cpu/conv_transpose_geometry.hpp"
#include "operators/registry.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

// X and Y are stored as the channels_last pass says (volt.layout, volt.input_layout: in a U-Net's
// decoder, between channels-last convolutions and Concats); the primitive picks its own layouts,
// and X and Y are reordered into and out of the run's scratch around it where they differ.
struct DeconvState {
  dnnl::primitive prim;  // the deconvolution, or the product of a gathered one (below)
  dnnl::memory::desc scratch, weights, bias, user_weights;
  dnnl_adapter::Staged src, dst;
  Tensor packed_weights;
  bool has_bias = false;
  // Or as a product and a gather (conv_transpose_gather.hpp): the 1x1 convolution `prim` to
  // Z, in the run's scratch, then each output row's taps added from it. oneDNN 2.6's jit
  // deconvolution on AVX2 ran a U-Net's 2x2 stride-2 upsamplings at 12-32 GFLOP/s, and 3-15x
  // slower than this in decoders of 64-128 channels.
  bool gathered = false;
  bool epilogue_in_product = false;  // bias and activation in the 1x1 convolution (one tap each)
  size_t z_offset = 0, bias_offset = 0;  // in the run's scratch: Z, and the bias per channel of Z
  dnnl::memory::desc z_md, src_md;       // Z and X as stored
  TapGather gather;
};

class ConvTranspose final : public Kernel {
 public:
  explicit ConvTranspose(const Node& n)
      : attrs_(n),
        act_(FusedActivation::of(n)),
        layout_(stored_layout(n)),
        x_layout_(stored_input_layout(n)) {}

  void infer(InferContext& ctx) const override {
    const Shape x =
        logical_shape(ctx.shape(0), x_layout_ != StoredLayout::ChannelsFirst, ctx.node());
    const DeconvGeometry g = attrs_.resolve(x, ctx.shape(1), ctx.node());
    Shape out{g.n, g.m};
    out.insert(out.end(), g.out.begin(), g.out.end());
    const bool bias = ctx.has_input(2);
    if (bias)
      VOLT_CHECK(numel_of(ctx.shape(2)) == g.m, InvalidArgument,
                 ctx.node().describe() + ": bias must have " + std::to_string(g.m) + " values");
    VOLT_CHECK(ctx.dtype(0) == ctx.dtype(1) && (!bias || ctx.dtype(2) == ctx.dtype(0)),
               InvalidModel, ctx.node().describe() + ": X, W and B must share one dtype");
    ctx.set_output(0, ctx.dtype(0),
                   layout_ != StoredLayout::ChannelsFirst ? to_channels_last(out) : out);
    const DType dt = ctx.dtype(0);
    if (numel_of(out) == 0 || numel_of(ctx.shape(0)) == 0) return;
    if (dt != DType::Float && dt != DType::BFloat16)
      return ctx.runs_reference_loop(std::string("dtype ") + dtype_name(dt));
    if (g.in.size() > 3) return ctx.runs_reference_loop("more than 3 spatial axes");
    try {
      ctx.set_state(dnnl_adapter::guarded(ctx.node(), [&] { return prepare(ctx, g, x, out); }));
    } catch (const KernelUnsupported& u) {
      ctx.runs_reference_loop(u.reason);
    }
  }

  void run(RunContext& ctx) const override {
    if (const auto* st = static_cast<const DeconvState*>(ctx.state_ptr()))
      return run_dnnl(*st, ctx);
    if (layout_ == StoredLayout::ChannelsFirst && x_layout_ == StoredLayout::ChannelsFirst) {
      reference(ctx, ctx.input(0), ctx.output(0));
    } else {  // the loop on channels-first copies
      const Tensor x = channels_first_copy(ctx.input(0), x_layout_);
      Tensor y = allocate_tensor(ctx.output(0).dtype(), to_channels_first(ctx.output(0).shape()));
      reference(ctx, x, y);
      write_stored(y, layout_, ctx.output(0));
    }
    apply_epilogue(ctx.output(0), nullptr, act_, nullptr, ctx.node());
  }

 private:
  std::shared_ptr<DeconvState> prepare(InferContext& ctx, const DeconvGeometry& g, const Shape& x,
                                       const Shape& out) const {
    using dims = dnnl::memory::dims;
    using tag = dnnl::memory::format_tag;
    if (gather_suits(ctx, g))
      if (auto st = prepare_gathered(ctx, g, x)) return st;
    auto st = std::make_shared<DeconvState>();
    const auto dt = dnnl_adapter::to_dnnl(ctx.dtype(0));
    const int64_t cg = g.c / g.group, mg = g.m / g.group, k_sp = numel_of(g.kernel);
    // oneDNN's deconvolution weights are [(G,) OC/G, IC/G, k...]; ONNX stores W as
    // [C, M/G, k...], so the same bytes are described with the strides of that order.
    Shape wshape, wstrides;
    if (g.group > 1) {
      wshape = {g.group, mg, cg};
      wstrides = {cg * mg * k_sp, k_sp, mg * k_sp};
    } else {
      wshape = {g.m, g.c};
      wstrides = {k_sp, g.m * k_sp};
    }
    int64_t stride = k_sp;
    for (int64_t k : g.kernel) {
      stride /= k;
      wshape.push_back(k);
      wstrides.push_back(stride);
    }
    st->user_weights = dnnl_adapter::strided_md(wshape, wstrides, dt);
    auto any = [&](const Shape& s) {
      return dnnl::memory::desc(dims(s.begin(), s.end()), dt, tag::any);
    };
    dims strides(g.strides.begin(), g.strides.end()), pl(g.pad_begin.begin(), g.pad_begin.end()),
        pr, dil;
    for (size_t i = 0; i < g.in.size(); ++i) {
      // The padding at the end that makes oneDNN's size formula give ours (negative where
      // output_padding or output_shape extends the output).
      pr.push_back((g.in[i] - 1) * g.strides[i] + (g.kernel[i] - 1) * g.dilations[i] + 1 -
                   g.pad_begin[i] - g.out[i]);
      dil.push_back(g.dilations[i] - 1);  // oneDNN counts dilation from 0
    }
    dnnl::primitive_attr attr = dnnl_adapter::scratch_attr();
    dnnl::post_ops ops;
    act_.append_to(ops);
    attr.set_post_ops(ops);
    st->has_bias = ctx.has_input(2);
    if (st->has_bias) st->bias = dnnl_adapter::plain_md({g.m}, dt);
    const auto alg = dnnl::algorithm::deconvolution_direct;
    const auto kind = dnnl::prop_kind::forward_inference;
    const auto d = st->has_bias
                       ? dnnl::deconvolution_forward::desc(kind, alg, any(x), any(wshape), st->bias,
                                                           any(out), strides, dil, pl, pr)
                       : dnnl::deconvolution_forward::desc(kind, alg, any(x), any(wshape), any(out),
                                                           strides, dil, pl, pr);
    const dnnl::deconvolution_forward::primitive_desc pd(d, attr, dnnl_adapter::engine());
    if (dnnl_adapter::is_reference(pd))
      ctx.runs_reference_loop(std::string("oneDNN ") + pd.impl_info_str());
    st->prim = dnnl::deconvolution_forward(pd);
    st->scratch = pd.scratchpad_desc();
    st->weights = pd.weights_desc();
    size_t bytes = st->scratch.get_size();
    st->src = dnnl_adapter::Staged(activation_md(x, dt, x_layout_), pd.src_desc(), true, bytes);
    st->dst = dnnl_adapter::Staged(activation_md(out, dt, layout_), pd.dst_desc(), false, bytes);
    if (const Tensor* w = ctx.input_tensor(1))
      st->packed_weights = dnnl_adapter::pack_constant(ctx, 1, *w, st->user_weights, st->weights);
    ctx.request_scratch(bytes);
    return st;
  }

  // Y channels-last or in blocks: there oneDNN has a jit 1x1 convolution (on channels-first
  // data its 1x1 convolutions are gemm-based). Z holds kh x kw / (sh x sw) times Y's values
  // (about; 2.25 for a 3x3 stride-2 decoder): up to 9 (a 3x3 of stride 1, measured 2.5-3x faster
  // than the deconvolution) it runs this way, beyond that the deconvolution needs no such
  // buffer (a 7x7 of stride 1 and 256 channels on 64x64 would want 200 MB of scratch).
  bool gather_suits(InferContext& ctx, const DeconvGeometry& g) const {
    return g.in.size() == 2 && ctx.dtype(0) == DType::Float && ctx.input_tensor(1) &&
           layout_ != StoredLayout::ChannelsFirst &&
           g.kernel[0] * g.kernel[1] <= 9 * g.strides[0] * g.strides[1];
  }

  // Null where no jit 1x1 convolution takes these layouts as they are.
  std::shared_ptr<DeconvState> prepare_gathered(InferContext& ctx, const DeconvGeometry& g,
                                                const Shape& x) const {
    const auto dt = dnnl::memory::data_type::f32;
    auto st = std::make_shared<DeconvState>();
    st->gathered = true;
    st->gather = tap_gather(g, block_channels(layout_));
    if (st->gather.runs == 0) return nullptr;
    st->epilogue_in_product = st->gather.one_tap_each;
    const int64_t taps = st->gather.taps, zc = g.m * taps, cg = g.c / g.group, mg = g.m / g.group;
    const Shape z{g.n, zc, g.in[0], g.in[1]};
    // The product's weights are [G, K x M/G, C/G, 1, 1] ([K x M, C, 1, 1] for one group), row
    // tap x M/G + m. W is [C, M/G, kh, kw], that is [G][C/G][M/G][K]: a strided view of it with
    // the rows split into [K, M/G] is reordered into them, plain, then packed
    // (pack_constant_staged).
    const Shape w_dims = g.group > 1 ? Shape{g.group, taps * mg, cg, 1, 1} : Shape{zc, g.c, 1, 1};
    const Shape split =
        g.group > 1 ? Shape{g.group, taps, mg, cg, 1, 1} : Shape{taps, g.m, g.c, 1, 1};
    const Shape split_strides = g.group > 1 ? Shape{cg * mg * taps, 1, taps, mg * taps, 1, 1}
                                            : Shape{1, taps, g.m * taps, 1, 1};
    st->user_weights = dnnl_adapter::plain_md(w_dims, dt);
    const dnnl::memory::desc w_any(dnnl::memory::dims(w_dims.begin(), w_dims.end()), dt,
                                   dnnl::memory::format_tag::any);
    st->src_md = activation_md(x, dt, x_layout_);
    st->z_md = activation_md(z, dt, layout_);
    dnnl::primitive_attr attr = dnnl_adapter::scratch_attr();
    st->has_bias = ctx.has_input(2);
    const bool product_bias = st->has_bias && st->epilogue_in_product;
    if (st->epilogue_in_product) {
      dnnl::post_ops ops;
      act_.append_to(ops);
      attr.set_post_ops(ops);
    }
    if (product_bias) st->bias = dnnl_adapter::plain_md({zc}, dt);
    const auto kind = dnnl::prop_kind::forward_inference;
    const auto alg = dnnl::algorithm::convolution_direct;
    const dnnl::memory::dims ones{1, 1}, zeros{0, 0};
    const auto d = product_bias
                       ? dnnl::convolution_forward::desc(kind, alg, st->src_md, w_any, st->bias,
                                                         st->z_md, ones, zeros, zeros, zeros)
                       : dnnl::convolution_forward::desc(kind, alg, st->src_md, w_any, st->z_md,
                                                         ones, zeros, zeros, zeros);
    const dnnl::convolution_forward::primitive_desc pd(d, attr, dnnl_adapter::engine());
    if (dnnl_adapter::is_reference(pd) ||
        std::string(pd.impl_info_str()).find("gemm") != std::string::npos)
      return nullptr;
    st->prim = dnnl::convolution_forward(pd);
    st->scratch = pd.scratchpad_desc();
    st->weights = pd.weights_desc();
    size_t bytes = st->scratch.get_size();
    auto reserve = [&](size_t n) {  // n bytes after what the scratch holds so far
      const size_t at = dnnl_adapter::align64(bytes);
      bytes = at + n;
      return at;
    };
    st->z_offset = reserve(static_cast<size_t>(numel_of(z)) * sizeof(float));
    if (product_bias) st->bias_offset = reserve(static_cast<size_t>(zc) * sizeof(float));
    st->packed_weights = dnnl_adapter::pack_constant_staged(
        ctx, 1, *ctx.input_tensor(1), dnnl_adapter::strided_md(split, split_strides, dt),
        dnnl_adapter::plain_md(split, dt), st->user_weights, st->weights);
    ctx.request_scratch(bytes);
    return st;
  }

  void run_gathered(const DeconvState& st, RunContext& ctx) const {
    char* scratch = static_cast<char*>(ctx.scratch());
    float* z = reinterpret_cast<float*>(scratch + st.z_offset);
    dnnl_adapter::Args args = {{DNNL_ARG_SRC, st.src_md, ctx.input(0).raw()},
                               {DNNL_ARG_DST, st.z_md, z}};
    args.add(DNNL_ARG_WEIGHTS, st.weights, st.packed_weights.raw());
    const float* b = st.has_bias ? ctx.input(2).data<float>() : nullptr;
    if (b && st.epilogue_in_product) {  // Z's channel (g x K + tap) x M/G + m takes B[g x M/G + m]
      float* bias = reinterpret_cast<float*>(scratch + st.bias_offset);
      const int64_t taps = st.gather.taps, mg = st.gather.group_m;
      for (int64_t c = 0; c < st.gather.m * taps; ++c) bias[c] = b[c / (taps * mg) * mg + c % mg];
      args.add(DNNL_ARG_BIAS, st.bias, bias);
    }
    dnnl_adapter::execute(st.prim, args, st.scratch, scratch);
    if (st.epilogue_in_product)
      gather_taps(st.gather, z, nullptr, FusedActivation{}, ctx.output(0).data<float>());
    else
      gather_taps(st.gather, z, b, act_, ctx.output(0).data<float>());
  }

  void run_dnnl(const DeconvState& st, RunContext& ctx) const {
    if (st.gathered) return run_gathered(st, ctx);
    void* scratch = ctx.scratch();
    void* y = ctx.output(0).raw();
    dnnl_adapter::Args args = {
        {DNNL_ARG_SRC, st.src.wanted, st.src.in(ctx.input(0).raw(), scratch)},
        {DNNL_ARG_DST, st.dst.wanted, st.dst.out(y, scratch)}};
    Tensor packed;  // weights computed at run time (training): reordered now
    if (st.packed_weights.defined()) {
      args.add(DNNL_ARG_WEIGHTS, st.weights, st.packed_weights.raw());
    } else {
      packed = allocate_tensor(DType::UInt8, {static_cast<int64_t>(st.weights.get_size())});
      dnnl_adapter::reorder_now(st.user_weights, ctx.input(1).raw(), st.weights, packed.raw());
      args.add(DNNL_ARG_WEIGHTS, st.weights, packed.raw());
    }
    if (st.has_bias) args.add(DNNL_ARG_BIAS, st.bias, ctx.input(2).raw());
    dnnl_adapter::execute(st.prim, args, st.scratch, scratch);
    st.dst.finish(y, scratch);
  }

  // Channels-first x and y.
  void reference(RunContext& ctx, const Tensor& x, Tensor& y) const {
    const Tensor& w = ctx.input(1);
    const DeconvGeometry g = attrs_.resolve(x.shape(), w.shape(), ctx.node());
    dispatch_numeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = typename Compute<T>::type;
      if constexpr (!std::is_floating_point_v<C>) {
        ctx.error("needs floating-point inputs");
      } else {
        const size_t r = g.in.size();
        const int64_t in_sp = numel_of(g.in), out_sp = numel_of(g.out), k_sp = numel_of(g.kernel);
        const int64_t cg = g.c / g.group, mg = g.m / g.group;
        const T* px = static_cast<const T*>(x.raw());
        const T* pw = static_cast<const T*>(w.raw());
        const T* pb = ctx.has_input(2) ? static_cast<const T*>(ctx.input(2).raw()) : nullptr;
        std::vector<C> acc(static_cast<size_t>(g.n * g.m * out_sp), C(0));
#pragma omp parallel for collapse(2)
        for (int64_t b = 0; b < g.n; ++b)
          for (int64_t oc = 0; oc < g.m; ++oc) {
            const int64_t grp = oc / mg, ocg = oc % mg;
            C* dst = acc.data() + (b * g.m + oc) * out_sp;
            std::vector<int64_t> i_idx(r), k_idx(r);
            for (int64_t icg = 0; icg < cg; ++icg) {
              const int64_t ic = grp * cg + icg;
              const T* src = px + (b * g.c + ic) * in_sp;
              const T* wk = pw + (ic * mg + ocg) * k_sp;
              for (int64_t ip = 0; ip < in_sp; ++ip) {
                int64_t rem = ip;
                for (size_t d = r; d-- > 0;) {
                  i_idx[d] = rem % g.in[d];
                  rem /= g.in[d];
                }
                const C v = static_cast<C>(src[ip]);
                for (int64_t kp = 0; kp < k_sp; ++kp) {
                  int64_t krem = kp, off = 0;
                  bool inside = true;
                  for (size_t d = r; d-- > 0;) {
                    k_idx[d] = krem % g.kernel[d];
                    krem /= g.kernel[d];
                  }
                  for (size_t d = 0; d < r && inside; ++d) {
                    const int64_t o =
                        i_idx[d] * g.strides[d] + k_idx[d] * g.dilations[d] - g.pad_begin[d];
                    inside = o >= 0 && o < g.out[d];
                    off = off * g.out[d] + o;
                  }
                  if (inside) dst[off] += v * static_cast<C>(wk[kp]);
                }
              }
            }
            for (int64_t o = 0; o < out_sp; ++o) dst[o] += pb ? static_cast<C>(pb[oc]) : C(0);
          }
        T* py = static_cast<T*>(y.raw());
        for (size_t i = 0; i < acc.size(); ++i) py[i] = static_cast<T>(acc[i]);
      }
    });
  }

  ConvTransposeAttributes attrs_;
  FusedActivation act_;
  StoredLayout layout_;    // of Y (volt.layout, from the channels_last pass)
  StoredLayout x_layout_;  // of X
};

}  // namespace

VOLT_REGISTER_KERNEL(conv_transpose, {.op = "ConvTranspose",
                                      .types = kFloatTypes,
                                      .create = make_kernel<ConvTranspose>});

}  // namespace volt
