// Convolution and pooling on cuDNN, NCHW (and N-d). The
// convolution's algorithm is chosen once per plan by cuDNN's heuristics, its workspace is the
// step's scratch. Pads must be symmetric (cuDNN's descriptors take one pad per axis);
// asymmetric ones are declined at plan time.
#include <memory>

#include "operators/common/layout.hpp"
#include "operators/cpu/conv_geometry.hpp"
#include "operators/cuda/cuda_kernel.hpp"
#include "operators/cuda/cudnn_descriptors.hpp"

namespace volt::cuda {
namespace {

// What a plan prepares once: the geometry, the cuDNN descriptors for its shapes (shapes are fixed
// per plan), the algorithm and its workspace size; for a channels-last convolution, its weights
// in [K, R, S, C] and where in the scratch a channels-first X is brought into channels-last.
struct ConvState {
  WindowGeometry geo;
  std::unique_ptr<TensorDesc> x, y, bias;
  std::unique_ptr<FilterDesc> w;
  std::unique_ptr<ConvDesc> conv;
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  size_t workspace = 0;
  Tensor channels_last_weights;  // defined for volt.layout = NHWC
  bool permute_input = false;    // volt.input_layout = NCHW: X comes channels-first
  size_t workspace_offset = 0;   // the workspace's place in the scratch (after a permuted X)
};

// [K, C, R, S] -> [K, R, S, C], through the host (plan time).
Tensor weights_channels_last(const Tensor& device_weights) {
  return permuted(device_weights.to(Device{}), channels_last_perm(4)).to(device_weights.device());
}

class Conv final : public Kernel {
 public:
  explicit Conv(const Node& n)
      : attrs_(n),
        group_(n.attr_int("group", 1)),
        layout_(n.attr_string("volt.layout", "NCHW")),
        input_channels_first_(n.attr_string("volt.input_layout", "") == "NCHW") {}
  void infer(InferContext& ctx) const override {
    const bool last = layout_ == "NHWC";
    if (!last && layout_ != "NCHW") throw KernelUnsupported{"CUDA Conv: NCHW or NHWC storage"};
    const Shape& w = ctx.shape(1);
    // X as the graph stores it, and its logical [N, C, spatial...].
    const bool x_last = last && !input_channels_first_;
    Shape x = ctx.shape(0);
    if (x_last) {
      if (x.size() != 4) ctx.input_error("a channels-last X must be 4-D");
      x = {x[0], x[3], x[1], x[2]};
    }
    if (x.size() < 3 || x.size() > 5 || w.size() != x.size())
      throw KernelUnsupported{"CUDA Conv takes 1-D to 3-D convolutions"};
    if (last && (x.size() != 4 || !ctx.input_tensor(1)))
      throw KernelUnsupported{"CUDA Conv: channels-last for 2-D convolutions of constant weights"};
    if (group_ <= 0 || x[1] != w[1] * group_ || w[0] % group_ != 0)
      ctx.input_error("channels do not match the weights and group");
    auto state = std::make_shared<ConvState>();
    state->geo = resolve_window(attrs_, Shape(x.begin() + 2, x.end()),
                                Shape(w.begin() + 2, w.end()), ctx.node());
    if (state->geo.pad_begin != state->geo.pad_end)
      throw KernelUnsupported{"CUDA Conv takes symmetric pads only"};
    if (ctx.has_input(2) && numel_of(ctx.shape(2)) != w[0])
      ctx.input_error("bias must have one value per output channel");
    Shape out{x[0], w[0]};
    out.insert(out.end(), state->geo.out.begin(), state->geo.out.end());
    const DType t = ctx.dtype(0);
    Shape bias_shape(out.size(), 1);
    bias_shape[1] = out[1];
    if (!numel_of(out)) {  // nothing to compute (and cuDNN describes no empty tensor)
      ctx.set_output(0, t, last ? Shape{out[0], out[2], out[3], out[1]} : out);
      return;
    }
    if (!numel_of(x)) throw KernelUnsupported{"CUDA Conv: an empty X with a non-empty output"};
    if (last) {
      const Shape x_stored{x[0], x[2], x[3], x[1]};
      out = {out[0], out[2], out[3], out[1]};  // stored channels-last from here on
      state->x = std::make_unique<TensorDesc>(t, x_stored, ChannelsLast{});
      state->y = std::make_unique<TensorDesc>(t, out, ChannelsLast{});
      state->w = std::make_unique<FilterDesc>(t, w, ChannelsLast{});
      if (ctx.has_input(2))
        state->bias = std::make_unique<TensorDesc>(t, Shape{1, 1, 1, w[0]}, ChannelsLast{});
      state->channels_last_weights = weights_channels_last(*ctx.input_tensor(1));
      state->permute_input = input_channels_first_;
      if (state->permute_input)  // X brought into channels-last at the start of the scratch
        state->workspace_offset =
            (static_cast<size_t>(numel_of(x)) * dtype_size(t) + 255) & ~size_t{255};
    } else {
      state->x = std::make_unique<TensorDesc>(t, x);
      state->y = std::make_unique<TensorDesc>(t, out);
      state->w = std::make_unique<FilterDesc>(t, w);
      if (ctx.has_input(2)) state->bias = std::make_unique<TensorDesc>(t, bias_shape);
    }
    state->conv = std::make_unique<ConvDesc>(state->geo, t, group_);
    // The algorithm, once per plan, from cuDNN's heuristics for these shapes.
    const auto chosen =
        choose_forward(plan_time_dnn(), *state->x, *state->w, *state->conv, *state->y);
    state->algo = chosen.algo;
    state->workspace = chosen.workspace;
    if (state->workspace_offset + state->workspace)
      ctx.request_scratch(state->workspace_offset + state->workspace);
    ctx.set_state(state);
    ctx.set_output(0, t, out);
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (!y.numel()) return;
    const ConvState& st = ctx.state<ConvState>();
    const void* w =
        st.channels_last_weights.defined() ? st.channels_last_weights.raw() : ctx.input(1).raw();
    const void* xp = x.raw();
    char* scratch = static_cast<char*>(ctx.scratch());
    if (st.permute_input) {  // [N, C, H, W] -> [N, H, W, C]
      const Shape& s = x.shape();
      const int64_t dims[4] = {s[0], s[2], s[3], s[1]};
      const int64_t strides[4] = {s[1] * s[2] * s[3], s[3], 1, s[2] * s[3]};
      launch_permute(static_cast<int>(dtype_size(x.dtype())), scratch, x.raw(), x.numel(), 4, dims,
                     strides, ctx.stream());
      check_launch("permute_kernel");
      xp = scratch;
    }
    cudnnHandle_t h = dnn(ctx, y);
    const float one = 1.f, zero = 0.f;
    VOLT_CUDA_CALL(cudnnConvolutionForward(h, &one, st.x->d, xp, st.w->d, w, st.conv->d, st.algo,
                                           scratch ? scratch + st.workspace_offset : nullptr,
                                           st.workspace, &zero, st.y->d, y.raw()));
    if (st.bias)
      VOLT_CUDA_CALL(
          cudnnAddTensor(h, &one, st.bias->d, ctx.input(2).raw(), &one, st.y->d, y.raw()));
  }

 private:
  WindowAttributes attrs_;
  int64_t group_;
  std::string layout_;
  bool input_channels_first_;
};

class Pool final : public Kernel {
 public:
  Pool(const Node& n, cudnnPoolingMode_t mode, bool global)
      : attrs_(n), mode_(mode), global_(global), layout_(n.attr_string("volt.layout", "NCHW")) {
    if (mode == CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING && n.attr_int("count_include_pad", 0))
      mode_ = CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
  }
  void infer(InferContext& ctx) const override {
    if (layout_ != "NCHW" && layout_ != "NHWC")
      throw KernelUnsupported{"CUDA pooling: NCHW or NHWC storage"};
    const bool last = layout_ == "NHWC";
    Shape x = ctx.shape(0);
    if (last) {  // the logical [N, C, H, W] of a stored [N, H, W, C]
      if (x.size() != 4) ctx.input_error("a channels-last X must be 4-D");
      x = {x[0], x[3], x[1], x[2]};
    }
    if (ctx.output_count() > 1 && ctx.node().has_output(1))
      throw KernelUnsupported{"CUDA MaxPool does not output indices"};
    const WindowGeometry geo = pool_window(attrs_, global_, x, ctx.node());
    Shape out{x[0], x[1]};
    out.insert(out.end(), geo.out.begin(), geo.out.end());
    if (last) out = {out[0], out[2], out[3], out[1]};
    if (numel_of(out))  // cuDNN describes no empty tensor; an empty output runs nothing
      ctx.set_state(pool_state(geo, mode_, ctx.dtype(0), ctx.shape(0), out, last));
    ctx.set_output(0, ctx.dtype(0), out);
  }
  void run(RunContext& ctx) const override {
    const PoolState& st = ctx.state<PoolState>();
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (!y.numel()) return;
    const float one = 1.f, zero = 0.f;
    VOLT_CUDA_CALL(cudnnPoolingForward(dnn(ctx, y), st.pool->d, &one, st.x->d, x.raw(), &zero,
                                       st.y->d, y.raw()));
  }

 private:
  WindowAttributes attrs_;
  cudnnPoolingMode_t mode_;
  bool global_;
  std::string layout_;
};

KernelDef pool(const char* op, int since, cudnnPoolingMode_t mode, bool global) {
  return cuda_kernel(op, since,
                     [=](const Node& n) { return std::make_unique<Pool>(n, mode, global); });
}

}  // namespace

VOLT_REGISTER_KERNEL(cuda_conv, cuda_kernel("Conv", 1, make_kernel<Conv>));
VOLT_REGISTER_KERNEL(cuda_max_pool, pool("MaxPool", 1, CUDNN_POOLING_MAX_DETERMINISTIC, false));
VOLT_REGISTER_KERNEL(cuda_avg_pool,
                     pool("AveragePool", 1, CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, false));
VOLT_REGISTER_KERNEL(cuda_global_avg_pool, pool("GlobalAveragePool", 1,
                                                CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, true));
VOLT_REGISTER_KERNEL(cuda_global_max_pool,
                     pool("GlobalMaxPool", 1, CUDNN_POOLING_MAX_DETERMINISTIC, true));

}  // namespace volt::cuda
