// ConvTranspose on cuDNN. A transposed convolution is the data gradient of the convolution whose
// input has ConvTranspose's output shape and whose output has its input shape, so it runs as
// cudnnConvolutionBackwardData with ConvTranspose's weights as that convolution's filter
// ([C, M/group, k...] is [K, C/group, k...] seen from the other side). cuDNN's descriptor takes
// one pad per axis: shapes whose output sizes a symmetric pad does not give back (some
// output_shape and auto_pad uses) are declined at plan time and run on the host.
#include <memory>

#include "operators/common/shape_util.hpp"
#include "operators/cpu/conv_transpose_geometry.hpp"
#include "operators/cuda/cuda_kernel.hpp"
#include "operators/cuda/cudnn_descriptors.hpp"

namespace volt::cuda {
namespace {

struct DeconvState {
  std::unique_ptr<TensorDesc> x, y, bias;  // ConvTranspose's input and output
  std::unique_ptr<FilterDesc> w;
  std::unique_ptr<ConvDesc> conv;
  cudnnConvolutionBwdDataAlgo_t algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  size_t workspace = 0;
};

class ConvTranspose final : public Kernel {
 public:
  explicit ConvTranspose(const Node& n) : attrs_(n) {}
  void infer(InferContext& ctx) const override {
    const Shape &x = ctx.shape(0), &w = ctx.shape(1);
    if (x.size() < 3 || x.size() > 5 || w.size() != x.size())
      throw KernelUnsupported{"CUDA ConvTranspose takes 1-D to 3-D"};
    if (ctx.dtype(1) != ctx.dtype(0)) ctx.input_error("X and W differ in dtype");
    const DeconvGeometry g = attrs_.resolve(x, w, ctx.node());
    if (g.group <= 0 || g.c % g.group != 0)
      ctx.input_error("input channels do not divide into the groups");
    // The convolution this is the transpose of: over the output, pad p on both sides, it must
    // give back the input's sizes.
    WindowGeometry conv;
    conv.kernel = g.kernel;
    conv.strides = g.strides;
    conv.dilations = g.dilations;
    conv.pad_begin = conv.pad_end = g.pad_begin;
    conv.in = g.out;
    conv.out = g.in;
    for (size_t i = 0; i < g.in.size(); ++i) {
      const int64_t p = g.pad_begin[i], span = g.dilations[i] * (g.kernel[i] - 1) + 1;
      if (p < 0 || g.out[i] + 2 * p < span ||
          (g.out[i] + 2 * p - span) / g.strides[i] + 1 != g.in[i])
        throw KernelUnsupported{"CUDA ConvTranspose: output sizes a symmetric pad does not give"};
    }
    if (ctx.has_input(2) && numel_of(ctx.shape(2)) != g.m)
      ctx.input_error("bias must have one value per output channel");
    Shape out{g.n, g.m};
    out.insert(out.end(), g.out.begin(), g.out.end());
    const DType t = ctx.dtype(0);
    ctx.set_output(0, t, out);
    if (!numel_of(out)) return;  // nothing to compute (and cuDNN describes no empty tensor)
    if (!numel_of(x)) throw KernelUnsupported{"CUDA ConvTranspose: an empty X"};
    auto st = std::make_shared<DeconvState>();
    st->x = std::make_unique<TensorDesc>(t, x);
    st->y = std::make_unique<TensorDesc>(t, out);
    st->w = std::make_unique<FilterDesc>(t, w);
    st->conv = std::make_unique<ConvDesc>(conv, t, g.group);
    if (ctx.has_input(2)) {
      Shape bias_shape(out.size(), 1);
      bias_shape[1] = g.m;
      st->bias = std::make_unique<TensorDesc>(t, bias_shape);
    }
    const auto chosen = choose_backward_data(plan_time_dnn(), *st->w, *st->x, *st->conv, *st->y);
    st->algo = chosen.algo;
    st->workspace = chosen.workspace;
    if (st->workspace) ctx.request_scratch(st->workspace);
    ctx.set_state(st);
  }
  void run(RunContext& ctx) const override {
    const Tensor &x = ctx.input(0), &w = ctx.input(1);
    Tensor& y = ctx.output(0);
    if (!y.numel()) return;
    const DeconvState& st = ctx.state<DeconvState>();
    cudnnHandle_t h = dnn(ctx, y);
    const float one = 1.f, zero = 0.f;
    VOLT_CUDA_CALL(cudnnConvolutionBackwardData(h, &one, st.w->d, w.raw(), st.x->d, x.raw(),
                                                st.conv->d, st.algo, ctx.scratch(), st.workspace,
                                                &zero, st.y->d, y.raw()));
    if (st.bias)
      VOLT_CUDA_CALL(
          cudnnAddTensor(h, &one, st.bias->d, ctx.input(2).raw(), &one, st.y->d, y.raw()));
  }

 private:
  ConvTransposeAttributes attrs_;
};

}  // namespace

VOLT_REGISTER_KERNEL(cuda_conv_transpose,
                     cuda_kernel("ConvTranspose", 1, make_kernel<ConvTranspose>));

}  // namespace volt::cuda
