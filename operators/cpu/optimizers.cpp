// The ai.onnx.preview.training optimizer ops: Adagrad, Momentum and Adam over any number of
// tensors. Inputs: R (learning rate), T (step), then the tensors, their gradients and states.
#include "operators/common/dispatch.hpp"
#include "operators/common/optimizer_math.hpp"
#include "operators/common/tensor_values.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

enum class Rule { Adagrad, Momentum, Adam };

class Optimizer final : public Kernel {
 public:
  Optimizer(const Node& n, Rule rule) : rule_(rule), node_(n) {
    states_ = rule == Rule::Adam ? 2 : 1;
    VOLT_CHECK(
        n.inputs.size() >= 2 && (n.inputs.size() - 2) % static_cast<size_t>(2 + states_) == 0,
        InvalidModel,
        n.describe() + ": expects R, T, then X, G" + (states_ == 2 ? ", V, H" : ", state") +
            " for each tensor");
  }
  void infer(InferContext& ctx) const override {
    const size_t k = tensors(ctx.input_count());
    // Each tensor's gradient and states are read element for element with it.
    for (size_t i = 0; i < k; ++i)
      for (size_t j = 1; j <= static_cast<size_t>(states_) + 1; ++j) {
        const size_t other = 2 + j * k + i;
        if (ctx.shape(other) != ctx.shape(2 + i) || ctx.dtype(other) != ctx.dtype(2 + i))
          ctx.input_error("input " + std::to_string(other) + " " + dtype_name(ctx.dtype(other)) +
                          shape_str(ctx.shape(other)) + " differs from its tensor's " +
                          dtype_name(ctx.dtype(2 + i)) + shape_str(ctx.shape(2 + i)));
      }
    for (size_t o = 0; o < ctx.output_count(); ++o) {
      const size_t in = 2 + (o < k ? o : 2 * k + (o - k));  // X_new, then the new states
      ctx.set_output(o, ctx.dtype(in), ctx.shape(in));
    }
  }
  void run(RunContext& ctx) const override {
    const size_t k = tensors(ctx.input_count());
    const double r = scalar_value(ctx.input(0));
    const int64_t t = scalar_int(ctx.input(1), ctx.node(), "T", 0, int64_t{1} << 53);
    for (size_t i = 0; i < k; ++i) {
      const Tensor& x = ctx.input(2 + i);
      const Tensor& g = ctx.input(2 + k + i);
      const Tensor& s1 = ctx.input(2 + 2 * k + i);
      const Tensor* s2 = states_ == 2 ? &ctx.input(2 + 3 * k + i) : nullptr;
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
          switch (rule_) {
            case Rule::Adagrad:
              optim::Adagrad{r, node_.attr_float("decay_factor", 0),
                             node_.attr_float("epsilon", 1e-6f),
                             node_.attr_float("norm_coefficient", 0), t}
                  .update(xv, gv, a);
              break;
            case Rule::Momentum:
              optim::Momentum{r,
                              node_.attr_float("alpha", 0),
                              node_.attr_float("beta", 0),
                              node_.attr_float("norm_coefficient", 0),
                              node_.attr_string("mode", "standard") == "nesterov",
                              t}
                  .update(xv, gv, a);
              break;
            case Rule::Adam:
              optim::Adam{r,
                          node_.attr_float("alpha", 0.9f),
                          node_.attr_float("beta", 0.999f),
                          node_.attr_float("epsilon", 1e-6f),
                          node_.attr_float("norm_coefficient", 0),
                          node_.attr_float("norm_coefficient_post", 0),
                          t}
                  .update(xv, gv, a, b);
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
  size_t tensors(size_t inputs) const { return (inputs - 2) / static_cast<size_t>(2 + states_); }
  Rule rule_;
  Node node_;
  int states_;
};

KernelDef optimizer(const char* op, Rule rule) {
  return {.domain = "ai.onnx.preview.training",
          .op = op,
          .foldable = false,
          .create = [=](const Node& n) { return std::make_unique<Optimizer>(n, rule); }};
}

}  // namespace

VOLT_REGISTER_KERNEL(adagrad, optimizer("Adagrad", Rule::Adagrad));
VOLT_REGISTER_KERNEL(momentum, optimizer("Momentum", Rule::Momentum));
VOLT_REGISTER_KERNEL(adam, optimizer("Adam", Rule::Adam));

}  // namespace volt
