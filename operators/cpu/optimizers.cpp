// The ai.onnx.preview.training optimizer ops: Adagrad, Momentum and Adam over any number of
// tensors. Inputs: R (learning rate), T (step), then the tensors, their gradients and states.
#include "operators/common/dispatch.hpp"
#include "operators/common/optimizer_op.hpp"
#include "operators/common/tensor_values.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

class Optimizer final : public Kernel {
 public:
  Optimizer(const Node& n, OptimizerRule rule) : op_(n, rule) {}
  void infer(InferContext& ctx) const override { op_.infer(ctx); }
  void run(RunContext& ctx) const override {
    const size_t k = op_.tensors(ctx.input_count());
    const double r = scalar_value(ctx.input(0));
    const int64_t t = scalar_int(ctx.input(1), ctx.node(), "T", 0, int64_t{1} << 53);
    // The rules for this step, and Adam's bias-corrected rate, once (not per element).
    const optim::Adagrad adagrad = op_.adagrad(r, t);
    const optim::Momentum momentum = op_.momentum(r, t);
    const optim::Adam adam = op_.adam(r, t);
    const double adam_rate = adam.rate();
    for (size_t i = 0; i < k; ++i) {
      const Tensor& x = ctx.input(2 + i);
      const Tensor& g = ctx.input(2 + k + i);
      const Tensor& s1 = ctx.input(2 + 2 * k + i);
      const Tensor* s2 = op_.states() == 2 ? &ctx.input(2 + 3 * k + i) : nullptr;
      dispatch_numeric(x.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        using C = typename Compute<T>::type;
        auto get = [](const Tensor& a, int64_t e) {
          return static_cast<double>(static_cast<C>(static_cast<const T*>(a.raw())[e]));
        };
        T* xo = ctx.has_output(i) ? static_cast<T*>(ctx.output(i).raw()) : nullptr;
        T* s1o = ctx.has_output(k + i) ? static_cast<T*>(ctx.output(k + i).raw()) : nullptr;
        T* s2o = s2 && ctx.has_output(2 * k + i) ? static_cast<T*>(ctx.output(2 * k + i).raw())
                                                 : nullptr;
        for (int64_t e = 0; e < x.numel(); ++e) {
          double xv = get(x, e), a = get(s1, e), b = s2 ? get(*s2, e) : 0;
          const double gv = get(g, e);
          switch (op_.rule()) {
            case OptimizerRule::Adagrad:
              adagrad.update(xv, gv, a);
              break;
            case OptimizerRule::Momentum:
              momentum.update(xv, gv, a);
              break;
            case OptimizerRule::Adam:
              adam.update(xv, gv, a, b, adam_rate);
              break;
          }
          if (xo) xo[e] = static_cast<T>(static_cast<C>(xv));
          if (s1o) s1o[e] = static_cast<T>(static_cast<C>(a));
          if (s2o) s2o[e] = static_cast<T>(static_cast<C>(b));
        }
      });
    }
  }

 private:
  OptimizerOp op_;
};

KernelDef optimizer(const char* op, OptimizerRule rule) {
  return {.domain = "ai.onnx.preview.training",
          .op = op,
          .foldable = false,
          .create = [=](const Node& n) { return std::make_unique<Optimizer>(n, rule); }};
}

}  // namespace

VOLT_REGISTER_KERNEL(adagrad, optimizer("Adagrad", OptimizerRule::Adagrad));
VOLT_REGISTER_KERNEL(momentum, optimizer("Momentum", OptimizerRule::Momentum));
VOLT_REGISTER_KERNEL(adam, optimizer("Adam", OptimizerRule::Adam));

}  // namespace volt
