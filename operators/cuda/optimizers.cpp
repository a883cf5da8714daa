// The ai.onnx.preview.training optimizers (Adagrad, Momentum, Adam) on the device: R and T are
// read on the host, then one update kernel per tensor (optimizers.cu). Layout and attributes are
// the CPU kernel's (operators/common/optimizer_op.hpp).
#include "operators/common/optimizer_op.hpp"
#include "operators/common/tensor_values.hpp"
#include "operators/cuda/cuda_kernel.hpp"

namespace volt::cuda {
namespace {

class Optimizer final : public Kernel {
 public:
  Optimizer(const Node& n, OptimizerRule rule) : op_(n, rule) {}
  void infer(InferContext& ctx) const override {
    if (ctx.input_count() > 2 && ctx.dtype(2) != DType::Float && ctx.dtype(2) != DType::Float16)
      throw KernelUnsupported{"CUDA optimizers: fp32 or fp16 tensors"};
    op_.infer(ctx);
  }
  void run(RunContext& ctx) const override {
    const size_t k = op_.tensors(ctx.input_count());
    const double r = scalar_value(ctx.input(0));
    const int64_t t = scalar_int(ctx.input(1), ctx.node(), "T", 0, int64_t{1} << 53);
    const size_t states = static_cast<size_t>(op_.states());
    for (size_t i = 0; i < k; ++i) {
      OptimizerUpdate u;
      u.rule = op_.rule();
      u.adagrad = op_.adagrad(r, t);
      u.momentum = op_.momentum(r, t);
      u.adam = op_.adam(r, t);
      for (size_t j = 0; j < 2 + states; ++j) u.in[j] = ctx.input(2 + j * k + i).raw();
      for (size_t j = 0; j < 1 + states; ++j)
        u.out[j] = ctx.has_output(j * k + i) ? ctx.output(j * k + i).raw() : nullptr;
      const Tensor& x = ctx.input(2 + i);
      launch_optimizer(u, elem_of(x.dtype(), ctx), x.numel(), ctx.stream());
      check_launch("optimizer kernel");
    }
  }

 private:
  OptimizerOp op_;
};

KernelDef optimizer(const char* op, OptimizerRule rule) {
  KernelDef def = cuda_kernel(
      op, 1, [=](const Node& n) { return std::make_unique<Optimizer>(n, rule); }, {0, 1});
  def.domain = "ai.onnx.preview.training";
  def.type_input = 2;  // the first tensor (R is the learning rate)
  def.foldable = false;
  return def;
}

}  // namespace

VOLT_REGISTER_KERNEL(cuda_adagrad, optimizer("Adagrad", OptimizerRule::Adagrad));
VOLT_REGISTER_KERNEL(cuda_momentum, optimizer("Momentum", OptimizerRule::Momentum));
VOLT_REGISTER_KERNEL(cuda_adam, optimizer("Adam", OptimizerRule::Adam));

}  // namespace volt::cuda
