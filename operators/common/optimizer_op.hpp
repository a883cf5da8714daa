// The ai.onnx.preview.training optimizer ops' layout, shared by the CPU and CUDA kernels: inputs
// R (learning rate), T (step), then the k tensors, their k gradients, and the state tensors
// (one set for Adagrad and Momentum, two for Adam); outputs the k new tensors, then the new
// states. The update rules and their attributes are in optimizer_math.hpp.
#pragma once
#include "operators/common/optimizer_math.hpp"
#include "operators/kernel.hpp"

namespace volt {

class OptimizerOp {
 public:
  OptimizerOp(const Node& n, OptimizerRule rule)
      : rule_(rule), states_(rule == OptimizerRule::Adam ? 2 : 1) {
    VOLT_CHECK(
        n.inputs.size() >= 2 && (n.inputs.size() - 2) % static_cast<size_t>(2 + states_) == 0,
        InvalidModel,
        n.describe() + ": expects R, T, then X, G" + (states_ == 2 ? ", V, H" : ", state") +
            " for each tensor");
    adagrad_ = {0, n.attr_float("decay_factor", 0), n.attr_float("epsilon", 1e-6f),
                n.attr_float("norm_coefficient", 0), 0};
    momentum_ = {0,
                 n.attr_float("alpha", 0),
                 n.attr_float("beta", 0),
                 n.attr_float("norm_coefficient", 0),
                 n.attr_string("mode", "standard") == "nesterov",
                 0};
    adam_ = {0,
             n.attr_float("alpha", 0.9f),
             n.attr_float("beta", 0.999f),
             n.attr_float("epsilon", 1e-6f),
             n.attr_float("norm_coefficient", 0),
             n.attr_float("norm_coefficient_post", 0),
             0};
  }
  OptimizerRule rule() const { return rule_; }
  int states() const { return states_; }
  size_t tensors(size_t inputs) const { return (inputs - 2) / static_cast<size_t>(2 + states_); }

  // Each tensor's gradient and states are read element for element with it.
  void infer(InferContext& ctx) const {
    const size_t k = tensors(ctx.input_count());
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

  // The rules with this step's learning rate `r` and step `t`.
  optim::Adagrad adagrad(double r, int64_t t) const {
    optim::Adagrad a = adagrad_;
    a.lr = r, a.t = t;
    return a;
  }
  optim::Momentum momentum(double r, int64_t t) const {
    optim::Momentum m = momentum_;
    m.lr = r, m.t = t;
    return m;
  }
  optim::Adam adam(double r, int64_t t) const {
    optim::Adam a = adam_;
    a.lr = r, a.t = t;
    return a;
  }

 private:
  OptimizerRule rule_;
  int states_;
  optim::Adagrad adagrad_;
  optim::Momentum momentum_;
  optim::Adam adam_;
};

}  // namespace volt
