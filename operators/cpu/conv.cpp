// Conv: oneDNN convolution for f32/bf16 (weights reordered once per plan into the blocked
// layout the primitive picks), and a direct N-d reference loop for every float type.
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "operators/common/convert.hpp"
#include "operators/common/cpu_isa.hpp"
#include "operators/common/dispatch.hpp"
#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/epilogue.hpp"
#include "operators/common/fused_activation.hpp"
#include "operators/common/layout.hpp"
#include "operators/common/own_activation.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/common/width_buckets.hpp"
#include "operators/cpu/conv_as_product.hpp"
#include "operators/cpu/conv_few_channels.hpp"
#include "operators/cpu/conv_live_taps.hpp"
#include "operators/cpu/conv_pointwise_matmul.hpp"
#include "operators/cpu/conv_reference.hpp"
#include "operators/cpu/conv_winograd.hpp"
#include "operators/registry.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

// Conv on oneDNN. The primitive picks its own (blocked) layouts for src and dst; the plain
// tensors of the graph are reordered into and out of the arena's scratch around it. Fused
// post-ops come from the fuse_conv_activation pass: a residual input (a sum post-op, the
// residual copied into dst first) and an activation (Relu, LeakyRelu, Clip). With volt.layout =
// NHWC (the channels_last pass) X, the residual and Y are stored channels-last, the layout the
// primitive picks, so no reorder runs around it; with volt.input_layout = NCHW as well, X comes
// from outside the region channels-first and oneDNN's reorder brings it into the primitive's
// layout (3.3x faster than a Transpose node did on a 224x224 image batch).
struct ConvState {
  dnnl::convolution_forward prim;
  dnnl::memory::desc weights, bias, scratch, user_weights, plain_residual;
  dnnl_adapter::Staged src, dst;  // X and Y as stored <-> as the primitive chose
  dnnl_adapter::PreparedReorder residual_in;
  Tensor packed_weights;
  bool has_bias = false;
  bool convert_residual = false;  // the residual needs a reorder into dst (layout or dtype)
  // The activation is volt's pass over Y after the primitive (own_activation.hpp), not a
  // post-op: oneDNN's Swish post-op doubled EfficientNet's stem (3 -> 32 channels, stride 2,
  // batch 8, 2 threads: 0.9-1.0 ms without it, 1.9-2.4 with), where the pass over the 12.8 MB
  // it wrote takes 0.34.
  bool own_activation = false;
  size_t scratch_bytes = 0;  // what the state asked for
  // A plan built for one of several shapes runs the primitive made for a bucket of widths
  // (width_buckets.hpp), kept in the node's memo; nothing above is set then. X is widened into
  // the scratch at x_at (from x_width columns to x_bucket), Y narrowed from y_at.
  struct Bucket {
    std::shared_ptr<const ConvState> conv;
    int64_t x_rows = 0, x_inner = 0, x_width = 0, x_bucket = 0;
    int64_t y_rows = 0, y_inner = 0, y_width = 0, y_bucket = 0;
    size_t x_at = 0, y_at = 0;
  };
  std::optional<Bucket> bucket;
  // Or, where most taps read padding, one product per tap (conv_live_taps.hpp); nothing else set.
  std::shared_ptr<const LiveTapProducts> live_taps;
  // Or volt's own Winograd convolution (conv_winograd.hpp); nothing else set.
  std::shared_ptr<const WinogradConv> winograd;
  // Or, for a stem over few channels in a plan for several shapes, volt's direct loop
  // (conv_few_channels.hpp); nothing else set.
  std::shared_ptr<const FewChannelConv> few_channels;
  // Or, for a pointwise convolution over channels-first tensors, one matmul
  // (conv_pointwise_matmul.hpp); nothing else set.
  std::shared_ptr<const PointwiseMatmul> pointwise;
  // Or, in a plan for several shapes, one product over the gathered windows
  // (conv_as_product.hpp); nothing else set.
  std::shared_ptr<const ConvAsProduct> as_product;
};

// The shapes of a 1-D convolution's 2-D form: a unit height inserted after N and C (X, W, Y) and
// a window of one row.
Shape with_unit_height(Shape s) {
  s.insert(s.begin() + 2, 1);
  return s;
}
ConvShapes with_unit_height(ConvShapes s) {
  WindowGeometry& w = s.win;
  for (auto [axis, unit] : {std::pair{&w.kernel, 1},
                            {&w.strides, 1},
                            {&w.dilations, 1},
                            {&w.pad_begin, 0},
                            {&w.pad_end, 0},
                            {&w.in, 1},
                            {&w.out, 1}})
    axis->insert(axis->begin(), unit);
  s.out = with_unit_height(std::move(s.out));
  return s;
}

class Conv final : public Kernel {
 public:
  explicit Conv(const Node& n)
      : attrs_(n),
        group_(n.attr_int("group", 1)),
        act_(FusedActivation::of(n)),
        residual_(n.has_input(3)),
        layout_(stored_layout(n)),
        x_layout_(stored_input_layout(n)),
        last_(layout_ != StoredLayout::ChannelsFirst),
        x_last_(x_layout_ != StoredLayout::ChannelsFirst),
        winograd_(n.attr_string("volt.algorithm", "direct") == "winograd"),
        bf16_(n.attr_string("volt.compute", "") == "bf16"),
        bf16_output_(bf16_ && n.attr_string("volt.output", "") == "bf16"),
        max_pool_(n.attr_ints("volt.max_pool")) {}

  void infer(InferContext& ctx) const override {
    const Shape x = logical_shape(ctx.shape(0), x_last_, ctx.node());
    const ConvShapes s = conv_shapes(attrs_, group_, x, ctx.shape(1), ctx.node());
    // With bf16 arithmetic, X may come in bf16 from the convolution before (use_bf16).
    VOLT_CHECK(ctx.dtype(0) == ctx.dtype(1) ||
                   (bf16_ && ctx.dtype(0) == DType::BFloat16 && ctx.dtype(1) == DType::Float),
               InvalidModel, ctx.node().describe() + ": X and W must share one dtype");
    const DType y_type = output_type(ctx.dtype(1));
    if (ctx.has_input(2))
      VOLT_CHECK(ctx.shape(2) == Shape{s.m}, InvalidArgument,
                 ctx.node().describe() + ": bias B must have shape [" + std::to_string(s.m) +
                     "], got " + shape_str(ctx.shape(2)));
    if (!max_pool_.empty()) return infer_pooled(ctx, s);
    const Shape r = residual_ ? logical_shape(ctx.shape(3), last_, ctx.node()) : Shape{};
    if (residual_) broadcast_shapes({s.out, r}, ctx.node());  // checks it broadcasts
    ctx.set_output(0, y_type, last_ ? to_channels_last(s.out) : s.out);
    if (numel_of(s.out) == 0) return;
    if (!is_fp32_or_bf16(ctx.dtype(1)))
      return ctx.runs_reference_loop(std::string("dtype ") + dtype_name(ctx.dtype(1)));
    if (s.win.in.size() > 3) return ctx.runs_reference_loop("more than 3 spatial axes");
    // The sum post-op adds a residual of either float type (so is Y): reordered into dst first.
    const bool sum_post_op = residual_ && r == s.out && is_fp32_or_bf16(ctx.dtype(3));
    if (residual_ && !sum_post_op) return ctx.runs_reference_loop("a broadcast residual");
    try {
      if (auto taps = live_tap_products(ctx, s, x)) {
        auto st = std::make_shared<ConvState>();
        st->live_taps = std::move(taps);
        return ctx.set_state(st);
      }
      if (auto wino = own_winograd(ctx, s)) {
        auto st = std::make_shared<ConvState>();
        st->winograd = std::move(wino);
        return ctx.set_state(st);
      }
      if (auto few = few_channels(ctx, s)) {
        auto st = std::make_shared<ConvState>();
        st->few_channels = std::move(few);
        return ctx.set_state(st);
      }
      if (!last_ && !x_last_ && !bf16_)
        if (auto pointwise = plan_pointwise_matmul(ctx, s, act_, residual_)) {
          auto st = std::make_shared<ConvState>();
          st->pointwise = std::move(pointwise);
          return ctx.set_state(st);
        }
      if (auto product = as_product(ctx, s)) {
        auto st = std::make_shared<ConvState>();
        st->as_product = std::move(product);
        return ctx.set_state(st);
      }
      if (auto st = bucketed(ctx, s, x)) return ctx.set_state(st);
      ctx.set_state(prepare(ctx, s, x));
    } catch (const KernelUnsupported& u) {
      ctx.runs_reference_loop(u.reason);
    }
  }

  void run(RunContext& ctx) const override {
    if (const auto* st = static_cast<const ConvState*>(ctx.state_ptr())) return run_dnnl(*st, ctx);
    const DType w_type = ctx.input(1).dtype();
    const Tensor* r = residual_ ? &ctx.input(3) : nullptr;
    if (ctx.input(0).dtype() == w_type && ctx.output(0).dtype() == w_type &&
        (!r || r->dtype() == w_type))
      return run_reference(ctx, ctx.input(0), r, ctx.output(0));
    // bf16 activations around fp32 weights without a primitive: the loops in W's dtype.
    const Tensor x = converted(ctx.input(0), w_type);
    Tensor r_converted;
    if (r) r_converted = converted(*r, w_type);
    Tensor y = allocate_tensor(w_type, ctx.output(0).shape());
    run_reference(ctx, x, r ? &r_converted : nullptr, y);
    convert_elements(y, ctx.output(0));
  }

 private:
  // With a max pool folded in: the pooled map, on volt's few-channel loop, which fuse_conv_max_pool
  // made sure takes it (an error otherwise, never the unpooled convolution).
  void infer_pooled(InferContext& ctx, const ConvShapes& s) const {
    VOLT_CHECK(
        max_pool_.size() == 2 && max_pool_[0] > 0 && max_pool_[1] > 0 && s.win.in.size() == 2,
        InvalidModel, ctx.node().describe() + ": volt.max_pool must be two window sizes");
    Shape pooled = s.out;
    pooled[2] /= max_pool_[0];
    pooled[3] /= max_pool_[1];
    ctx.set_output(0, ctx.dtype(1), last_ ? to_channels_last(pooled) : pooled);
    std::shared_ptr<const FewChannelConv> few;
    if (!residual_ && !bf16_ && ctx.dtype(0) == DType::Float && ctx.dtype(1) == DType::Float &&
        ctx.input_tensor(1))
      few = plan_few_channel_conv(ctx, s, *ctx.input_tensor(1), act_, x_layout_, layout_, false,
                                  max_pool_[0], max_pool_[1]);
    if (!few)
      fail(ErrorCode::NotImplemented,
           ctx.node().describe() +
               ": the max pool folded into this convolution needs volt's "
               "few-channel loop, which does not take it here");
    auto st = std::make_shared<ConvState>();
    st->few_channels = std::move(few);
    ctx.set_state(st);
  }

  // The output's dtype for weights of dtype `w`: the weights', or bf16 where use_bf16 asked.
  DType output_type(DType w) const {
    return bf16_output_ && w == DType::Float ? DType::BFloat16 : w;
  }

  static bool is_fp32_or_bf16(DType t) { return t == DType::Float || t == DType::BFloat16; }

  void run_reference(RunContext& ctx, const Tensor& x_in, const Tensor* r_in, Tensor& y_out) const {
    const Tensor* b = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    if (!last_) {
      reference(ctx, x_in, b, r_in, y_out);
      return;
    }
    // Channels-last without a primitive (an odd dtype or geometry): the reference loop on
    // channels-first copies.
    const Tensor x = channels_first_copy(x_in, x_layout_);
    Tensor r;
    if (r_in) r = channels_first_copy(*r_in, layout_);
    Tensor y = allocate_tensor(y_out.dtype(), to_channels_first(y_out.shape()));
    reference(ctx, x, b, r_in ? &r : nullptr, y);
    write_stored(y, layout_, y_out);
  }

  void reference(RunContext& ctx, const Tensor& x, const Tensor* b, const Tensor* residual,
                 Tensor& y) const {
    const ConvShapes s = conv_shapes(attrs_, group_, x.shape(), ctx.input(1).shape(), ctx.node());
    Tensor saved;  // the residual, when the output is written over it (in place)
    if (residual && residual->raw() == y.raw()) {
      saved = allocate_tensor(residual->dtype(), residual->shape());
      std::memcpy(saved.raw(), residual->raw(), residual->nbytes());
      residual = &saved;
    }
    dispatch_numeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = typename Compute<T>::type;
      if constexpr (std::is_floating_point_v<C>) {
        T* py = static_cast<T*>(y.raw());
        reference_conv<T>(s, static_cast<const T*>(x.raw()),
                          static_cast<const T*>(ctx.input(1).raw()),
                          b ? static_cast<const T*>(b->raw()) : nullptr, py);
      } else {
        ctx.error("Conv needs floating-point inputs");
      }
    });
    // Conv's order (as its post-ops): the residual, then the activation.
    if (residual) add_broadcast(y, *residual, ctx.node());
    apply_epilogue(y, nullptr, act_, nullptr, ctx.node());
  }

  void run_dnnl(const ConvState& st, RunContext& ctx) const {
    if (st.winograd)
      return run_winograd_conv(*st.winograd, ctx.input(0).data<float>(),
                               ctx.has_input(2) ? ctx.input(2).data<float>() : nullptr,
                               residual_ ? ctx.input(3).data<float>() : nullptr,
                               ctx.output(0).data<float>(), ctx.scratch());
    if (st.few_channels)
      return run_few_channel_conv(*st.few_channels, ctx.input(0).data<float>(),
                                  ctx.has_input(2) ? ctx.input(2).data<float>() : nullptr,
                                  ctx.output(0).data<float>());
    if (st.pointwise) {
      float* y = ctx.output(0).data<float>();
      if (residual_) residual_into(ctx, y);  // the sum post-op adds to what Y holds
      return run_pointwise_matmul(
          *st.pointwise, act_, ctx.input(1).data<float>(), ctx.input(0).data<float>(),
          ctx.has_input(2) ? ctx.input(2).data<float>() : nullptr, y, ctx.scratch());
    }
    if (st.as_product)
      return run_conv_as_product(*st.as_product, ctx.input(0).data<float>(),
                                 ctx.has_input(2) ? ctx.input(2).data<float>() : nullptr,
                                 ctx.output(0).data<float>(), ctx.scratch(), ctx.threads());
    if (st.live_taps)
      return run_live_tap_products(*st.live_taps, ctx.input(0).data<float>(),
                                   ctx.has_input(2) ? ctx.input(2).data<float>() : nullptr,
                                   ctx.output(0).data<float>(), ctx.scratch());
    if (!st.bucket) {
      run_primitive(st, ctx, ctx.input(0).raw(), ctx.output(0).raw());
      return activate(st, ctx.output(0));
    }
    const ConvState::Bucket& b = *st.bucket;
    char* scratch = static_cast<char*>(ctx.scratch());
    const float* x = ctx.input(0).data<float>();
    float* y = ctx.output(0).data<float>();
    // (A width at its bucket's edge needs no copy: the primitive reads X and writes Y in place.)
    const bool widen = b.x_bucket != b.x_width, narrow = b.y_bucket != b.y_width;
    float* wide_x = widen ? reinterpret_cast<float*>(scratch + b.x_at) : nullptr;
    float* wide_y = narrow ? reinterpret_cast<float*>(scratch + b.y_at) : y;
    if (widen) widen_rows(x, wide_x, b.x_rows, b.x_width, b.x_bucket, b.x_inner);
    run_primitive(*b.conv, ctx, widen ? wide_x : x, wide_y);
    if (narrow) narrow_rows(wide_y, y, b.y_rows, b.y_bucket, b.y_width, b.y_inner);
    activate(*b.conv, ctx.output(0));
  }

  // The activation the primitive left to volt, over every float Y stores.
  void activate(const ConvState& st, Tensor& y) const {
    if (st.own_activation) apply_own_activation_in_parallel(act_, y.data<float>(), y.numel());
  }

  // The residual in Y's buffer `y` (as stored), for a sum post-op: copied, unless the planner
  // gave the output the residual's buffer (inplace_input).
  void residual_into(RunContext& ctx, void* y) const {
    const void* r = ctx.input(3).raw();
    if (r != y) std::memcpy(y, r, ctx.output(0).nbytes());
  }

  // The primitive on X and Y at these addresses (the node's, or their widened copies).
  void run_primitive(const ConvState& st, RunContext& ctx, const void* x, void* y) const {
    char* scratch = static_cast<char*>(ctx.scratch());
    const void* src = st.src.in(x, scratch);
    void* dst = st.dst.out(y, scratch);
    if (residual_) {  // the sum post-op adds the convolution to what dst already holds
      if (st.convert_residual)
        st.residual_in(ctx.input(3).raw(), dst);
      else
        residual_into(ctx, y);
    }
    dnnl_adapter::Args args = {{DNNL_ARG_SRC, st.src.wanted, src},
                               {DNNL_ARG_DST, st.dst.wanted, dst}};
    Tensor packed;
    if (st.packed_weights.defined()) {
      args.add(DNNL_ARG_WEIGHTS, st.weights, st.packed_weights.raw());
    } else {  // weights computed at run time (training): reorder them now
      packed = allocate_tensor(DType::UInt8, {static_cast<int64_t>(st.weights.get_size())});
      dnnl_adapter::reorder_now(st.user_weights, ctx.input(1).raw(), st.weights, packed.raw());
      args.add(DNNL_ARG_WEIGHTS, st.weights, packed.raw());
    }
    if (st.has_bias) args.add(DNNL_ARG_BIAS, st.bias, ctx.input(2).raw());
    dnnl_adapter::execute(st.prim, args, st.scratch, scratch);
    st.dst.finish(y, scratch);
  }

  std::shared_ptr<ConvState> prepare(InferContext& ctx, const ConvShapes& shapes,
                                     const Shape& x_shape) const {
    // A 1-D convolution runs as the 2-D one of unit height it is (the same bytes, channels-first):
    // oneDNN 2.6 has its depthwise kernels for 2-D only and ran a 1-D one (Conformer's 31 taps
    // over 256 channels, 500 steps) as im2col and gemm, 1.26 ms against 0.05.
    const bool lift = shapes.win.in.size() == 1 && x_layout_ == StoredLayout::ChannelsFirst &&
                      layout_ == StoredLayout::ChannelsFirst;
    const ConvShapes s = lift ? with_unit_height(shapes) : shapes;
    const Shape x = lift ? with_unit_height(x_shape) : x_shape;
    return dnnl_adapter::guarded(ctx.node(), [&] {
      using dims = dnnl::memory::dims;
      using tag = dnnl::memory::format_tag;
      auto st = std::make_shared<ConvState>();
      const auto dt = dnnl_adapter::to_dnnl(ctx.dtype(1));
      const auto x_dt = dnnl_adapter::to_dnnl(ctx.dtype(0));
      const auto y_dt = dnnl_adapter::to_dnnl(output_type(ctx.dtype(1)));
      // bf16 arithmetic on fp32 weights: the primitive reads bf16 activations and weights (the
      // reorders into its layouts convert them) and writes fp32, or bf16 for a bf16 reader.
      const auto cdt = bf16_ && ctx.dtype(1) == DType::Float ? dnnl::memory::data_type::bf16 : dt;
      const Shape ws = lift ? with_unit_height(ctx.shape(1)) : ctx.shape(1);
      Shape wshape = ws;
      if (s.group > 1) {  // oneDNN wants grouped weights as [G, M/G, C/G, k...]
        wshape = {s.group, s.m / s.group};
        wshape.insert(wshape.end(), ws.begin() + 1, ws.end());
      }
      const dnnl::memory::desc plain_src = activation_md(x, x_dt, x_layout_),
                               plain_dst = activation_md(s.out, y_dt, layout_);
      // Taps that read padding only, for every output, are left out (constant weights: they
      // are read in place, as a strided view that skips them, when packed).
      const std::optional<LiveWindow> live =
          ctx.input_tensor(1) ? live_window(s.win) : std::nullopt;
      const WindowGeometry& win = live ? live->window : s.win;
      size_t weights_offset = 0;
      if (live) {
        const size_t spatial = wshape.size() - win.kernel.size();
        const std::vector<int64_t> full = strides_of(wshape);
        Shape kept = wshape;
        for (size_t d = 0; d < win.kernel.size(); ++d) {
          kept[spatial + d] = win.kernel[d];
          weights_offset += static_cast<size_t>(live->first_tap[d] * full[spatial + d]);
        }
        weights_offset *= dtype_size(ctx.dtype(1));
        st->user_weights = dnnl_adapter::strided_md(kept, full, dt);
        wshape = kept;
      } else {
        st->user_weights = dnnl_adapter::plain_md(wshape, dt);
      }
      // The primitive picks its layouts, except where the region stores blocks: then those.
      const dnnl::memory::desc free_src(dims(x.begin(), x.end()), cdt, tag::any),
          free_dst(dims(s.out.begin(), s.out.end()), y_dt, tag::any);
      // On AVX2, oneDNN picks blocks of 8 channels when free to, and its jit kernels read
      // channels-last too. Where the arithmetic per element is small (1x1, depthwise, a stem of
      // few channels) the reorders into and out of blocks cost more than the blocked kernel
      // saves, so a channels-last region is asked for as stored (EfficientNet-B0, batch 1:
      // 25.7 -> 15.5 ms); a dense spatial convolution runs blocked and stages (a 3x3 of 64
      // channels, stride 2: 5.5 ms channels-last, 3.3 with its two reorders; keras_nhwc 32.7 ->
      // 20.6 ms). The jit check below still frees the layouts where only a slow kernel is left.
      //
      // A grouped convolution of 8 or more channels a group reads channels-last X once per group,
      // a few of each pixel's channels at a time: from memory, once X outgrows the caches. There
      // blocks, where each group's channels lie together, win despite the reorders (RegNetY-400MF
      // at batch 8, its stride-2 3x3s of 6 and 13 groups over 19 and 10 MB: 7.7 -> 5.4 and 5.4 ->
      // 3.3 ms; a 5 MB X of 55 groups stays channels-last, 1.0 against 1.6 ms in blocks).
      constexpr int64_t kGroupedBlocksAbove = int64_t{8} << 20;  // bytes of X
      const bool dense_spatial =
          numel_of(win.kernel) > 1 &&
          ((s.group == 1 && x[1] >= 16) ||
           (s.group > 1 && x[1] / s.group >= 8 &&
            numel_of(x) * static_cast<int64_t>(sizeof(float)) > kGroupedBlocksAbove));
      const bool as_stored = !cpu_has_avx512() && !dense_spatial &&
                             x_layout_ == StoredLayout::ChannelsLast &&
                             layout_ == StoredLayout::ChannelsLast;
      dnnl::memory::desc src_any =
          block_channels(x_layout_) || as_stored ? activation_md(x, cdt, x_layout_) : free_src;
      dnnl::memory::desc dst_any =
          block_channels(layout_) || as_stored ? activation_md(s.out, y_dt, layout_) : free_dst;
      // A 1-D convolution over whole blocks of channels runs on oneDNN's blocked kernels: left
      // free, oneDNN 2.6 picks its channels-last brgconv, at 125-175 GFLOP/s on wav2vec2's strided
      // 512-channel layers where the blocked kernel runs 215-225, and the channels-first tensors
      // around it then go in and out by transposes where blocks reorder fast. Input reorder,
      // convolution and output reorder, 2 threads, Zen 4 (/tmp oneDNN benchmark): 512 -> 512,
      // 3 taps, stride 2, 3199 steps 14.9 -> 11.6 ms; 256 -> 512 pointwise over 500 steps 0.88
      // -> 0.60; 80 -> 384, 3 taps, 3000 steps 3.04 -> 2.51; 384 -> 384 12.6-13.0 -> 12.0-12.1;
      // 10 taps stride 5 over 50000 steps 369-376 -> 314-321. A waveform's first layer (one
      // channel in) reads X as stored: 0.31 ms + a 0.47 transpose -> 0.17 + 0.10 over a second of
      // audio.
      if (lift && cpu_has_avx512() && s.group == 1 && s.m % 16 == 0 &&
          (x[1] % 16 == 0 || x[1] < 4)) {
        src_any = x[1] % 16 == 0 ? dnnl::memory::desc(dims(x.begin(), x.end()), cdt, tag::nChw16c)
                                 : plain_src;
        dst_any = dnnl::memory::desc(dims(s.out.begin(), s.out.end()), y_dt, tag::nChw16c);
      }
      const dnnl::memory::desc w_any(dims(wshape.begin(), wshape.end()), cdt, tag::any);
      dims strides(win.strides.begin(), win.strides.end()),
          pl(win.pad_begin.begin(), win.pad_begin.end()),
          pr(win.pad_end.begin(), win.pad_end.end()), dil;
      for (int64_t d : win.dilations) dil.push_back(d - 1);  // oneDNN counts dilation from 0
      dnnl::primitive_attr attr = dnnl_adapter::scratch_attr();
      dnnl::post_ops ops;
      if (residual_) ops.append_sum(1.0f);
      st->own_activation = y_dt == dnnl::memory::data_type::f32 && has_own_activation(act_);
      if (!st->own_activation) act_.append_to(ops);
      attr.set_post_ops(ops);
      if (ctx.has_input(2)) {
        st->has_bias = true;
        st->bias = dnnl_adapter::plain_md({s.m}, dt);
      }
      auto make_pd = [&](dnnl::algorithm alg) {
        const auto d =
            st->has_bias
                ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, alg, src_any,
                                                  w_any, st->bias, dst_any, strides, dil, pl, pr)
                : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, alg, src_any,
                                                  w_any, dst_any, strides, dil, pl, pr);
        return dnnl::convolution_forward::primitive_desc(d, attr, dnnl_adapter::engine());
      };
      const auto pd = [&] {
        if (winograd_suits(ctx, s)) try {
            return make_pd(dnnl::algorithm::convolution_winograd);
          } catch (const dnnl::error&) {
            // not on this CPU or with these post-ops: the direct algorithm
          }
        auto direct = make_pd(dnnl::algorithm::convolution_direct);
        // Layouts forced on it (blocks for a region whose X arrives channels-last: ConvNeXt's
        // depthwise 7x7) can leave oneDNN only its reference implementation, 30x slower than
        // its jit kernels, or (channels-last on AVX2) its im2col gemm: then the primitive picks
        // its layouts and reorders stage the region's.
        const std::string impl = direct.impl_info_str();
        const bool slow =
            dnnl_adapter::is_reference(direct) || impl.find("gemm") != std::string::npos;
        if (slow && (src_any != free_src || dst_any != free_dst)) {
          src_any = free_src;
          dst_any = free_dst;
          direct = make_pd(dnnl::algorithm::convolution_direct);
        }
        return direct;
      }();
      if (dnnl_adapter::is_reference(pd))
        ctx.runs_reference_loop(std::string("oneDNN ") + pd.impl_info_str());
      st->prim = dnnl::convolution_forward(pd);
      st->weights = pd.weights_desc();
      st->scratch = pd.scratchpad_desc();
      size_t total = st->scratch.get_size();
      st->src = dnnl_adapter::Staged(plain_src, pd.src_desc(), true, total);
      st->dst = dnnl_adapter::Staged(plain_dst, pd.dst_desc(), false, total);
      if (residual_) {  // into dst's layout and dtype, unless it is already both
        st->plain_residual = activation_md(s.out, dnnl_adapter::to_dnnl(ctx.dtype(3)), layout_);
        st->convert_residual = st->plain_residual != st->dst.wanted;
        if (st->convert_residual)
          st->residual_in = dnnl_adapter::PreparedReorder(st->plain_residual, st->dst.wanted);
      }
      if (const Tensor* w = ctx.input_tensor(1))
        st->packed_weights =
            dnnl_adapter::pack_constant(ctx, 1, *w, st->user_weights, st->weights, weights_offset);
      ctx.request_scratch(total);
      st->scratch_bytes = total;
      return st;
    });
  }

  // One product per live tap where most taps read padding (conv_live_taps.hpp): f32 with
  // constant weights, no residual, X and Y in any stored layout.
  std::shared_ptr<const LiveTapProducts> live_tap_products(InferContext& ctx, const ConvShapes& s,
                                                           const Shape& x) const {
    if (residual_ || bf16_ || ctx.dtype(0) != DType::Float || ctx.dtype(1) != DType::Float ||
        !ctx.input_tensor(1))
      return nullptr;
    using dt = dnnl::memory::data_type;
    return plan_live_tap_products(ctx, s, *ctx.input_tensor(1), ctx.has_input(2), act_,
                                  activation_md(x, dt::f32, x_layout_),
                                  activation_md(s.out, dt::f32, layout_));
  }

  // Winograd's algorithm where the prefer_winograd pass asked for it: volt's F(4x4, 3x3)
  // (conv_winograd.hpp) on AVX2 or AVX-512, f32 with constant weights, a residual of Y's type
  // and layout; oneDNN's (AVX-512 only, undilated) where volt's declines. Measured per node,
  // ResNet-18's 3x3 layers at batch 1, 2 threads, on a Zen 4: with oneDNN held to AVX2 (against
  // its direct jit:avx2) 64 channels on 56x56 1.04 -> 0.42 ms, 128 on 28x28 1.05 -> 0.45, 256
  // on 14x14 1.06 -> 0.78; on AVX-512 (against oneDNN's wino_2x3) 0.53 -> 0.36, 0.33 -> 0.33,
  // 0.48 -> 0.49. A new input shape costs no primitive and no weight transform: the CRNN's first
  // run at a new width 13.7 -> 5.1 ms (steady 4.1 -> 3.3).
  std::shared_ptr<const WinogradConv> own_winograd(InferContext& ctx, const ConvShapes& s) const {
    if (!winograd_ || bf16_ || ctx.dtype(0) != DType::Float || ctx.dtype(1) != DType::Float ||
        !ctx.input_tensor(1) || (residual_ && ctx.dtype(3) != DType::Float) ||
        numel_of(Shape(s.out.begin() + 2, s.out.end())) < kMinWinogradPixels)
      return nullptr;
    // Taps that read only padding (DeepLab's ASPP: 3x3s dilated by 12-36 over a 14x14 map, most
    // taps dead) leave the direct convolution a smaller window, often a 1x1: cheaper than
    // transforming patches of zeros (deeplabv3_mbv3 b1 8.8 -> 51.7 ms when Winograd took them).
    if (live_window(s.win)) return nullptr;
    return plan_winograd_conv(ctx, s, *ctx.input_tensor(1), act_, x_layout_, layout_);
  }

  // A stem over few channels in a plan built for one of several shapes: volt's loop, which
  // needs no code generated for the shape (conv_few_channels.hpp); and in the plan specialized
  // to such a shape later, so that the shape's runs give the same bits before and after.
  // Elsewhere oneDNN's kernel, which is faster (a text-line recognizer's 1 -> 32 stem at batch
  // 1: 42 us against the loop's 67; 3 -> 64 stride 2: 221-241 against 263-295), except for eight
  // output channels with AVX-512: its kernels there block sixteen, the loop one vector of eight
  // (LeNet's 1 -> 8 stem at batch 64: 162-165 us against 129-149). Its AVX2 kernels block eight:
  // 172-205 us against the loop's 214-239 on an AVX2 EPYC.
  std::shared_ptr<const FewChannelConv> few_channels(InferContext& ctx, const ConvShapes& s) const {
    if (residual_ || bf16_ || ctx.dtype(0) != DType::Float || ctx.dtype(1) != DType::Float ||
        !ctx.input_tensor(1))
      return nullptr;
    return plan_few_channel_conv(ctx, s, *ctx.input_tensor(1), act_, x_layout_, layout_,
                                 !ctx.shapes_vary() && (s.m != 8 || !cpu_has_avx512()));
  }

  // In a plan for several shapes, a convolution none of the kernels above took, as one product
  // over its gathered windows (conv_as_product.hpp): no code generated for the shape, where the
  // buckets below generate it at each new bucket. f32 with constant weights, no residual.
  std::shared_ptr<const ConvAsProduct> as_product(InferContext& ctx, const ConvShapes& s) const {
    if (!ctx.shapes_vary() || residual_ || bf16_ || ctx.dtype(0) != DType::Float ||
        ctx.dtype(1) != DType::Float || !ctx.input_tensor(1))
      return nullptr;
    return plan_conv_as_product(ctx, s, *ctx.input_tensor(1), ctx.has_input(2), act_, x_layout_,
                                layout_);
  }

  // The state of a plan built for one of several shapes: the primitive for the bucket of the
  // output width (width_buckets.hpp), from the node's memo or made and kept there; null where
  // buckets do not apply: f32, 2-D, explicit pads (auto_pad's depend on the width), constant
  // weights, no residual (the sum post-op would need it widened too).
  std::shared_ptr<ConvState> bucketed(InferContext& ctx, const ConvShapes& s,
                                      const Shape& x) const {
    if (!ctx.shapes_vary() || !ctx.memo() || residual_ || bf16_ || s.win.in.size() != 2 ||
        ctx.dtype(0) != DType::Float || ctx.dtype(1) != DType::Float || !ctx.input_tensor(1) ||
        (attrs_.auto_pad != "NOTSET" && attrs_.auto_pad != "VALID"))
      return nullptr;
    const WindowGeometry& win = s.win;
    const int64_t span = (win.kernel[1] - 1) * win.dilations[1] + 1;
    // The narrowest X whose output reaches the bucket: at least X itself.
    const int64_t wanted =
        (bucket_width(win.out[1]) - 1) * win.strides[1] + span - win.pad_begin[1] - win.pad_end[1];
    Shape wide = x;
    wide[3] = std::max(x[3], wanted);
    const ConvShapes ws = conv_shapes(attrs_, group_, wide, ctx.shape(1), ctx.node());
    std::string key = "conv bucket";
    const int64_t words[] = {
        wide[0], wide[1], wide[2], wide[3],
        static_cast<int64_t>(reinterpret_cast<uintptr_t>(ctx.input_tensor(1)->raw()))};
    key.append(reinterpret_cast<const char*>(words), sizeof words);
    auto conv = std::static_pointer_cast<const ConvState>(ctx.memo()->find(key));
    if (!conv) {
      conv = prepare(ctx, ws, wide);
      ctx.memo()->keep(key, std::const_pointer_cast<ConvState>(conv));
    } else {
      ctx.request_scratch(conv->scratch_bytes);
    }
    // A stored row: W groups of one value (channels-first), of all channels (channels-last) or
    // of one block of channels.
    auto inner = [](StoredLayout layout, int64_t channels) {
      return layout == StoredLayout::ChannelsFirst
                 ? int64_t{1}
                 : (layout == StoredLayout::ChannelsLast ? channels : block_channels(layout));
    };
    ConvState::Bucket b;
    b.conv = conv;
    b.x_inner = inner(x_layout_, x[1]);
    b.x_width = x[3];
    b.x_bucket = wide[3];
    b.x_rows = numel_of(x) / (b.x_width * b.x_inner);
    b.y_inner = inner(layout_, s.m);
    b.y_width = win.out[1];
    b.y_bucket = ws.win.out[1];
    b.y_rows = numel_of(s.out) / (b.y_width * b.y_inner);
    b.x_at = dnnl_adapter::align64(conv->scratch_bytes);
    b.y_at = b.x_at + dnnl_adapter::align64(static_cast<size_t>(numel_of(wide)) * sizeof(float));
    ctx.request_scratch(b.y_at + static_cast<size_t>(numel_of(ws.out)) * sizeof(float));
    auto st = std::make_shared<ConvState>();
    st->bucket = std::move(b);
    return st;
  }

  // Winograd F(4x4, 3x3) (F(2x2, 3x3) at batch 1) does a 3×3 stride-1 f32 convolution in
  // about half the multiplications, trading the last bits. Asked for by the prefer_winograd
  // pass; checked again here on the resolved geometry. Shape-generic plans keep it too: oneDNN
  // lays Winograd weights out per problem shape, but many widths share a layout (and so the
  // packed copy), and a CRNN stream of 200 new widths ran 1.44-1.60 s with it against
  // 1.76-1.95 s with direct convolutions only.
  bool winograd_suits(const InferContext& ctx, const ConvShapes& s) const {
    if (!winograd_ || bf16_ || ctx.dtype(0) != DType::Float || s.group != 1 || !ctx.input_tensor(1))
      return false;
    // oneDNN's with few channels: a 1 -> 8 3x3 ran 9x slower by it than direct, 64 -> 64 2x
    // faster (the pass marks down to 16 -> 8 for volt's kernel).
    if (s.c < 64 || s.m < 64) return false;
    if (s.win.kernel != std::vector<int64_t>{3, 3}) return false;
    for (size_t i = 0; i < 2; ++i)
      if (s.win.strides[i] != 1 || s.win.dilations[i] != 1) return false;
    // Small feature maps: the tiles overhang the output and the weight transform (slow in oneDNN:
    // ~200 ms for a 512x512 3x3 kernel here) costs more at plan time than it saves. Measured on
    // ResNet-50: its 7x7 convolutions ran no faster by Winograd (batch 1: 22.6 ms either way,
    // batch 8: 172 vs 171 ms) while their transforms took 140 ms (batch 1) and 400 ms (batch 8)
    // of the first run; its 14x14 ones gained 3% (batch 1) and 10% (batch 8).
    const int64_t pixels = numel_of(Shape(s.out.begin() + 2, s.out.end()));
    return pixels >= kMinWinogradPixels;
  }
  static constexpr int64_t kMinWinogradPixels = 100;  // per image: 10x10

  WindowAttributes attrs_;
  int64_t group_;
  FusedActivation act_;
  bool residual_;
  StoredLayout layout_;    // of Y and the residual
  StoredLayout x_layout_;  // of X (the region's first convolutions read X channels-first)
  bool last_, x_last_;     // stored in channels-last shapes
  bool winograd_;
  bool bf16_;         // fp32 weights, bf16 arithmetic (precision = bf16)
  bool bf16_output_;  // and a bf16 output (its readers compute in bf16 too)
  // A max pool over the result, folded in by fuse_conv_max_pool: its window (as far apart),
  // which volt's few-channel loop applies as it stores the rows; empty for none.
  std::vector<int64_t> max_pool_;
};

}  // namespace

// A fused residual (input 3) that dies here holds the output: the sum post-op then adds the
// convolution to it where it lies, with no copy.
VOLT_REGISTER_KERNEL(
    conv, {.op = "Conv", .types = kFloatTypes, .inplace_input = 3, .create = make_kernel<Conv>});

}  // namespace volt
