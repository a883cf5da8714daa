// Convolution and pooling on cuDNN, NCHW (and N-d). The
// convolution's algorithm is chosen once per plan by cuDNN's heuristics, its workspace is the
// step's scratch. Pads must be symmetric (cuDNN's descriptors take one pad per axis);
// asymmetric ones are declined at plan time.
#include <memory>

#include "operators/cpu/conv_geometry.hpp"
#include "operators/cuda/cuda_kernel.hpp"
#include "operators/cuda/cudnn_descriptors.hpp"

namespace volt::cuda {
namespace {

// What a plan prepares once: the geometry, the cuDNN descriptors for its shapes (shapes are fixed
// per plan), the algorithm and its workspace size.
struct ConvState {
  WindowGeometry geo;
  std::unique_ptr<TensorDesc> x, y, bias;
  std::unique_ptr<FilterDesc> w;
  std::unique_ptr<ConvDesc> conv;
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  size_t workspace = 0;
};

class Conv final : public Kernel {
 public:
  explicit Conv(const Node& n) : attrs_(n), group_(n.attr_int("group", 1)) {}
  void infer(InferContext& ctx) const override {
    const Shape &x = ctx.shape(0), &w = ctx.shape(1);
    if (x.size() < 3 || x.size() > 5 || w.size() != x.size())
      throw KernelUnsupported{"CUDA Conv takes 1-D to 3-D convolutions"};
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
    state->x = std::make_unique<TensorDesc>(ctx.dtype(0), x);
    state->y = std::make_unique<TensorDesc>(ctx.dtype(0), out);
    state->w = std::make_unique<FilterDesc>(ctx.dtype(0), w);
    state->conv = std::make_unique<ConvDesc>(state->geo, ctx.dtype(0), group_);
    if (ctx.has_input(2)) {
      Shape bias_shape(out.size(), 1);
      bias_shape[1] = out[1];
      state->bias = std::make_unique<TensorDesc>(ctx.dtype(0), bias_shape);
    }
    // The algorithm, once per plan, from cuDNN's heuristics for these shapes.
    const auto chosen =
        choose_forward(plan_time_dnn(), *state->x, *state->w, *state->conv, *state->y);
    state->algo = chosen.algo;
    state->workspace = chosen.workspace;
    if (state->workspace) ctx.request_scratch(state->workspace);
    ctx.set_state(state);
    ctx.set_output(0, ctx.dtype(0), out);
  }
  void run(RunContext& ctx) const override {
    const ConvState& st = ctx.state<ConvState>();
    const Tensor &x = ctx.input(0), &w = ctx.input(1);
    Tensor& y = ctx.output(0);
    if (!y.numel()) return;
    cudnnHandle_t h = dnn(ctx, y);
    const float one = 1.f, zero = 0.f;
    VOLT_CUDA_CALL(cudnnConvolutionForward(h, &one, st.x->d, x.raw(), st.w->d, w.raw(), st.conv->d,
                                           st.algo, ctx.scratch(), st.workspace, &zero, st.y->d,
                                           y.raw()));
    if (st.bias)
      VOLT_CUDA_CALL(
          cudnnAddTensor(h, &one, st.bias->d, ctx.input(2).raw(), &one, st.y->d, y.raw()));
  }

 private:
  WindowAttributes attrs_;
  int64_t group_;
};

class Pool final : public Kernel {
 public:
  Pool(const Node& n, cudnnPoolingMode_t mode, bool global)
      : attrs_(n), mode_(mode), global_(global) {
    if (mode == CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING && n.attr_int("count_include_pad", 0))
      mode_ = CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
  }
  void infer(InferContext& ctx) const override {
    const Shape& x = ctx.shape(0);
    if (ctx.output_count() > 1 && ctx.node().has_output(1))
      throw KernelUnsupported{"CUDA MaxPool does not output indices"};
    WindowGeometry geo = pool_window(attrs_, global_, x, ctx.node());
    Shape out{x[0], x[1]};
    out.insert(out.end(), geo.out.begin(), geo.out.end());
    ctx.set_state(std::make_shared<WindowGeometry>(std::move(geo)));
    ctx.set_output(0, ctx.dtype(0), out);
  }
  void run(RunContext& ctx) const override {
    const WindowGeometry& geo = ctx.state<WindowGeometry>();
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (!y.numel()) return;
    const PoolDesc pd(geo, mode_);
    const TensorDesc xd(x.dtype(), x.shape()), yd(y.dtype(), y.shape());
    const float one = 1.f, zero = 0.f;
    VOLT_CUDA_CALL(
        cudnnPoolingForward(dnn(ctx, y), pd.d, &one, xd.d, x.raw(), &zero, yd.d, y.raw()));
  }

 private:
  WindowAttributes attrs_;
  cudnnPoolingMode_t mode_;
  bool global_;
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
