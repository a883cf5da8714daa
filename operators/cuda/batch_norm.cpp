// BatchNormalization on cuDNN, in inference form (statistics given) and training form (batch
// statistics, updated running ones), and its gradient (ai.volt BatchNormGrad). X may be fp16;
// scale, bias and statistics are fp32 (use_fp16 keeps them so), as cuDNN wants.
//
// The running variance follows ONNX (and the CPU kernel): the batch's population variance,
// where cuDNN's own running update would use the unbiased one. So cuDNN's running outputs are
// not used: its saved batch mean and inverse deviation feed a small kernel that writes ONNX's
// running_mean = mean * momentum + batch_mean * (1 - momentum), and likewise the variance.
#include "operators/common/shape_util.hpp"
#include "operators/cuda/cuda_kernel.hpp"
#include "operators/cuda/cudnn_descriptors.hpp"

namespace volt::cuda {
namespace {

// cuDNN's descriptor of per-channel values for X of this shape: [1, C, 1, 1...].
Shape channel_shape(const Shape& x) {
  Shape s(std::max<size_t>(x.size(), 4), 1);
  s[1] = x[1];
  return s;
}

// X's descriptor and that of its per-channel values, made once per plan (for a non-empty X:
// cuDNN describes no empty tensor, and an empty X runs nothing).
struct NormState {
  TensorDesc x, channels;
  NormState(DType t, const Shape& shape)
      : x(t, shape), channels(DType::Float, channel_shape(shape)) {}
};
void prepare_descriptors(InferContext& ctx, DType t, const Shape& x) {
  if (numel_of(x)) ctx.set_state(std::make_shared<NormState>(t, x));
}

double cudnn_epsilon(float epsilon) {
  return std::max<double>(epsilon, CUDNN_BN_MIN_EPSILON);
}

class BatchNorm final : public Kernel {
 public:
  explicit BatchNorm(const Node& n)
      : epsilon_(n.attr_float("epsilon", 1e-5f)),
        momentum_(n.attr_float("momentum", 0.9f)),
        training_(n.attr_int("training_mode", 0) != 0) {}
  void infer(InferContext& ctx) const override {
    const Shape& x = ctx.shape(0);
    if (x.size() < 2 || x.size() > 5) ctx.input_error("X must be 2-D to 5-D");
    for (size_t i = 1; i <= 4; ++i) {
      if (numel_of(ctx.shape(i)) != x[1]) ctx.input_error("statistics must have one per channel");
      if (ctx.dtype(i) != DType::Float)
        throw KernelUnsupported{"CUDA BatchNormalization takes fp32 scale and statistics"};
    }
    ctx.set_output(0, ctx.dtype(0), x);
    prepare_descriptors(ctx, ctx.dtype(0), x);
    if (!training_) {
      if (ctx.output_count() > 1 && ctx.node().has_output(1))
        throw KernelUnsupported{"CUDA BatchNormalization: statistics outputs in inference form"};
      return;
    }
    for (size_t i = 1; i <= 2; ++i)
      if (ctx.output_count() > i) ctx.set_output(i, DType::Float, ctx.shape(i + 2));
    // The batch's mean and inverse deviation, and running statistics for cuDNN to update (not
    // read: ONNX's are written below).
    ctx.request_scratch(4 * static_cast<size_t>(x[1]) * sizeof(float));
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (!y.numel()) return;
    const NormState& st = ctx.state<NormState>();
    const TensorDesc &xd = st.x, &sd = st.channels;
    cudnnHandle_t h = dnn(ctx, y);
    const float one = 1.f, zero = 0.f;
    const void *scale = ctx.input(1).raw(), *bias = ctx.input(2).raw();
    if (!training_) {
      VOLT_CUDA_CALL(cudnnBatchNormalizationForwardInference(
          h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd.d, x.raw(), xd.d, y.raw(), sd.d, scale, bias,
          ctx.input(3).raw(), ctx.input(4).raw(), cudnn_epsilon(epsilon_)));
      return;
    }
    float* saved = static_cast<float*>(ctx.scratch());
    const int64_t c = x.dim(1);
    float* unused_running = saved + 2 * c;
    VOLT_CUDA_CALL(cudaMemsetAsync(unused_running, 0, 2 * static_cast<size_t>(c) * sizeof(float),
                                   stream_of(ctx)));
    VOLT_CUDA_CALL(cudnnBatchNormalizationForwardTraining(
        h, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd.d, x.raw(), xd.d, y.raw(), sd.d, scale, bias,
        0.0, unused_running, unused_running + c, cudnn_epsilon(epsilon_), saved, saved + c));
    float* running_mean = ctx.has_output(1) ? ctx.output(1).data<float>() : nullptr;
    float* running_var = ctx.has_output(2) ? ctx.output(2).data<float>() : nullptr;
    launch_running_stats(running_mean, running_var, ctx.input(3).data<float>(),
                         ctx.input(4).data<float>(), saved, saved + c, c, momentum_,
                         static_cast<float>(cudnn_epsilon(epsilon_)), ctx.stream());
    check_launch("running_stats_kernel");
  }

 private:
  float epsilon_, momentum_;
  bool training_;
};

// Inputs dY, X, scale (and the running statistics, which the training form does not read);
// outputs dX, dscale, dbias. The inference form's gradient (frozen statistics) is left to the
// host kernel.
class BatchNormGrad final : public Kernel {
 public:
  explicit BatchNormGrad(const Node& n)
      : epsilon_(n.attr_float("epsilon", 1e-5f)), training_(n.attr_int("training", 1) != 0) {}
  void infer(InferContext& ctx) const override {
    if (!training_) throw KernelUnsupported{"CUDA BatchNormGrad: frozen statistics"};
    const Shape& x = ctx.shape(1);
    if (x.size() < 2 || x.size() > 5) ctx.input_error("X must be 2-D to 5-D");
    if (ctx.shape(0) != x || ctx.dtype(0) != ctx.dtype(1))
      ctx.input_error("the gradient must match X");
    if (numel_of(ctx.shape(2)) != x[1]) ctx.input_error("scale must have one value per channel");
    if (ctx.dtype(2) != DType::Float)
      throw KernelUnsupported{"CUDA BatchNormGrad takes an fp32 scale"};
    ctx.set_output(0, ctx.dtype(1), x);
    for (size_t i = 1; i <= 2; ++i)
      if (ctx.output_count() > i) ctx.set_output(i, DType::Float, ctx.shape(2));
    prepare_descriptors(ctx, ctx.dtype(1), x);
    ctx.request_scratch(2 * static_cast<size_t>(x[1]) * sizeof(float));  // unwanted outputs
  }
  void run(RunContext& ctx) const override {
    const Tensor &dy = ctx.input(0), &x = ctx.input(1);
    Tensor& dx = ctx.output(0);
    const int64_t c = x.dim(1);
    float* spare = static_cast<float*>(ctx.scratch());
    float* dscale = ctx.has_output(1) ? ctx.output(1).data<float>() : spare;
    float* dbias = ctx.has_output(2) ? ctx.output(2).data<float>() : spare + c;
    if (!x.numel()) {  // no samples: every gradient is zero
      launch_fill(Elem::F32, dscale, c, 0.f, ctx.stream());
      launch_fill(Elem::F32, dbias, c, 0.f, ctx.stream());
      return check_launch("fill_kernel");
    }
    const NormState& st = ctx.state<NormState>();
    const TensorDesc &xd = st.x, &sd = st.channels;
    const float one = 1.f, zero = 0.f;
    VOLT_CUDA_CALL(cudnnBatchNormalizationBackward(
        dnn(ctx, dx), CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, xd.d, x.raw(), xd.d,
        dy.raw(), xd.d, dx.raw(), sd.d, ctx.input(2).raw(), dscale, dbias, cudnn_epsilon(epsilon_),
        nullptr, nullptr));
  }

 private:
  float epsilon_;
  bool training_;
};

}  // namespace

VOLT_REGISTER_KERNEL(cuda_batch_norm, cuda_kernel("BatchNormalization", 7, make_kernel<BatchNorm>));
VOLT_REGISTER_KERNEL(cuda_batch_norm_grad,
                     cuda_volt_kernel("BatchNormGrad", make_kernel<BatchNormGrad>));

}  // namespace volt::cuda
