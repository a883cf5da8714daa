// The backward kernels of convolution and pooling on cuDNN (domain ai.volt; the CPU versions in
// operators/cpu/backward_nn.cpp): ConvGrad for the data and the weights, BiasGrad, PoolGrad. As
// in the forward kernels, the algorithm is chosen once per plan and windows cuDNN's descriptors
// cannot express are declined at plan time (the node then runs on the host).
#include <memory>

#include "operators/common/shape_util.hpp"
#include "operators/cuda/cuda_kernel.hpp"
#include "operators/cuda/cudnn_descriptors.hpp"

namespace volt::cuda {
namespace {

struct ConvGradState {
  std::unique_ptr<TensorDesc> x, dy;
  std::unique_ptr<FilterDesc> w;
  std::unique_ptr<ConvDesc> conv;
  cudnnConvolutionBwdDataAlgo_t data_algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t filter_algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  size_t workspace = 0;
};

// Inputs dY, X, W of a convolution Y = Conv(X, W); output dX (wrt 0) or dW (wrt 1).
class ConvGrad final : public Kernel {
 public:
  explicit ConvGrad(const Node& n)
      : attrs_(n), group_(n.attr_int("group", 1)), wrt_(n.attr_int("wrt", 0)) {}
  void infer(InferContext& ctx) const override {
    const Shape &dy = ctx.shape(0), &x = ctx.shape(1), &w = ctx.shape(2);
    if (ctx.dtype(1) != ctx.dtype(0) || ctx.dtype(2) != ctx.dtype(0))
      ctx.input_error("dY, X and W differ in dtype");
    if (x.size() < 3 || x.size() > 5 || w.size() != x.size())
      throw KernelUnsupported{"CUDA ConvGrad takes 1-D to 3-D convolutions"};
    if (group_ <= 0 || x[1] != w[1] * group_ || w[0] % group_ != 0)
      ctx.input_error("channels do not match the weights and group");
    auto st = std::make_shared<ConvGradState>();
    const WindowGeometry geo = resolve_window(attrs_, Shape(x.begin() + 2, x.end()),
                                              Shape(w.begin() + 2, w.end()), ctx.node());
    if (geo.pad_begin != geo.pad_end)
      throw KernelUnsupported{"CUDA ConvGrad takes symmetric pads only"};
    Shape y{x[0], w[0]};
    y.insert(y.end(), geo.out.begin(), geo.out.end());
    if (y != dy)
      ctx.input_error("the gradient " + shape_str(dy) + " is not the convolution's output " +
                      shape_str(y));
    const DType t = ctx.dtype(0);
    ctx.set_output(0, t, wrt_ == 0 ? x : w);
    // An empty gradient in or out computes nothing (run() fills zeros), and cuDNN describes no
    // empty tensor.
    if (!numel_of(dy) || !numel_of(x) || !numel_of(w)) return;
    st->x = std::make_unique<TensorDesc>(t, x);
    st->dy = std::make_unique<TensorDesc>(t, dy);
    st->w = std::make_unique<FilterDesc>(t, w);
    st->conv = std::make_unique<ConvDesc>(geo, t, group_);
    cudnnHandle_t h = plan_time_dnn();
    if (wrt_ == 0) {
      const auto chosen = choose_backward_data(h, *st->w, *st->dy, *st->conv, *st->x);
      st->data_algo = chosen.algo;
      st->workspace = chosen.workspace;
    } else {
      const auto chosen = choose_backward_filter(h, *st->x, *st->dy, *st->conv, *st->w);
      st->filter_algo = chosen.algo;
      st->workspace = chosen.workspace;
    }
    if (st->workspace) ctx.request_scratch(st->workspace);
    ctx.set_state(st);
  }
  void run(RunContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    Tensor& out = ctx.output(0);
    if (!out.numel()) return;
    if (!dy.numel()) {  // nothing flowed back: a zero gradient
      launch_fill(elem_of(out.dtype(), ctx), out.raw(), out.numel(), 0.f, ctx.stream());
      return check_launch("fill_kernel");
    }
    const ConvGradState& st = ctx.state<ConvGradState>();
    cudnnHandle_t h = dnn(ctx, out);
    const float one = 1.f, zero = 0.f;
    if (wrt_ == 0)
      VOLT_CUDA_CALL(cudnnConvolutionBackwardData(h, &one, st.w->d, ctx.input(2).raw(), st.dy->d,
                                                  dy.raw(), st.conv->d, st.data_algo, ctx.scratch(),
                                                  st.workspace, &zero, st.x->d, out.raw()));
    else
      VOLT_CUDA_CALL(cudnnConvolutionBackwardFilter(
          h, &one, st.x->d, ctx.input(1).raw(), st.dy->d, dy.raw(), st.conv->d, st.filter_algo,
          ctx.scratch(), st.workspace, &zero, st.w->d, out.raw()));
  }

 private:
  WindowAttributes attrs_;
  int64_t group_, wrt_;
};

// A convolution bias's gradient: dY summed over every axis but the channels (axis 1).
class BiasGrad final : public Kernel {
 public:
  explicit BiasGrad(const Node&) {}
  void infer(InferContext& ctx) const override {
    const Shape& dy = ctx.shape(0);
    if (dy.size() < 2) ctx.input_error("the gradient must be N x C x ...");
    if (dy.size() > static_cast<size_t>(kMaxRank))
      throw KernelUnsupported{"CUDA reductions take up to 8 dims"};
    ctx.set_output(0, ctx.dtype(0), {dy[1]});
  }
  void run(RunContext& ctx) const override {
    const Tensor& dy = ctx.input(0);
    Tensor& out = ctx.output(0);
    std::vector<char> reduced(dy.rank(), 1);  // every axis but the channels
    reduced[1] = 0;
    int64_t n_reduced = 1;
    const ReduceGeometry geo = reduce_geometry(dy.shape(), reduced, n_reduced);
    launch_reduce(ReduceOp::Sum, elem_of(dy.dtype(), ctx), out.raw(), dy.raw(), out.numel(),
                  n_reduced, geo, ctx.stream());
    check_launch("reduce_kernel");
  }
};

// Inputs dY, X, Y of a pooling Y = Pool(X); output dX. Max pooling sends each output's gradient
// to its window's first largest input, as the CPU kernel does.
class PoolGrad final : public Kernel {
 public:
  explicit PoolGrad(const Node& n)
      : attrs_(n),
        global_(n.attr_int("global", 0) != 0),
        mode_(n.attr_string("kind", "max") == "max" ? CUDNN_POOLING_MAX_DETERMINISTIC
              : n.attr_int("count_include_pad", 0) != 0
                  ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                  : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING) {}
  void infer(InferContext& ctx) const override {
    const Shape& x = ctx.shape(1);
    if (ctx.dtype(0) != ctx.dtype(1) || ctx.dtype(2) != ctx.dtype(1))
      ctx.input_error("dY, X and Y differ in dtype");
    const WindowGeometry geo = pool_window(attrs_, global_, x, ctx.node());
    Shape y{x[0], x[1]};
    y.insert(y.end(), geo.out.begin(), geo.out.end());
    if (ctx.shape(0) != y || ctx.shape(2) != y)
      ctx.input_error("dY and Y must be the pooling's output " + shape_str(y));
    if (numel_of(x) && numel_of(y))  // cuDNN describes no empty tensor; see run()
      ctx.set_state(pool_state(geo, mode_, ctx.dtype(1), x, y, false));
    ctx.set_output(0, ctx.dtype(1), x);
  }
  void run(RunContext& ctx) const override {
    const Tensor &dy = ctx.input(0), &x = ctx.input(1), &y = ctx.input(2);
    Tensor& dx = ctx.output(0);
    if (!dx.numel()) return;
    if (!dy.numel()) {
      launch_fill(elem_of(dx.dtype(), ctx), dx.raw(), dx.numel(), 0.f, ctx.stream());
      return check_launch("fill_kernel");
    }
    const PoolState& st = ctx.state<PoolState>();
    const float one = 1.f, zero = 0.f;
    VOLT_CUDA_CALL(cudnnPoolingBackward(dnn(ctx, dx), st.pool->d, &one, st.y->d, y.raw(), st.y->d,
                                        dy.raw(), st.x->d, x.raw(), &zero, st.x->d, dx.raw()));
  }

 private:
  WindowAttributes attrs_;
  bool global_;
  cudnnPoolingMode_t mode_;
};

}  // namespace

VOLT_REGISTER_KERNEL(cuda_conv_grad, cuda_volt_kernel("ConvGrad", make_kernel<ConvGrad>));
VOLT_REGISTER_KERNEL(cuda_bias_grad, cuda_volt_kernel("BiasGrad", make_kernel<BiasGrad>));
VOLT_REGISTER_KERNEL(cuda_pool_grad, cuda_volt_kernel("PoolGrad", make_kernel<PoolGrad>));

}  // namespace volt::cuda
