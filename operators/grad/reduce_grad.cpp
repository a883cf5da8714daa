// Gradient rules of reductions, Softmax/LogSoftmax and the loss ops.
#include "operators/grad/gradient_rule.hpp"

namespace volt {
namespace {

// A value shaped like the reduction's result (keepdims or not), broadcast back to the input's
// shape; divided by the count of reduced elements when `mean`.
std::string spread(GradEmitter& e, const std::string& v, bool mean) {
  const Node& n = e.node();
  std::map<std::string, Attribute> attrs{
      {"keepdims", int_attr(n.attr_int("keepdims", 1))},
      {"noop_with_empty_axes", int_attr(n.attr_int("noop_with_empty_axes", 0))},
      {"mean", int_attr(mean)}};
  std::vector<std::string> ins{v, e.shape_of(e.input(0))};
  if (n.has_input(1))
    ins.push_back(e.input(1));
  else if (n.has_attr("axes"))
    attrs["axes"] = ints_attr(n.attr_ints("axes"));
  return e.emit1("ReduceGrad", ins, attrs, kVoltDomain);
}

GradientRule reduce(bool mean) {
  return [mean](GradEmitter& e) {
    if (e.needs_grad(0)) e.set_grad(0, spread(e, e.grad_of_output(0), mean));
  };
}

// The other reductions: dx = spread(g) * (a factor from x and the result y).
enum class Reduction { SumSquare, L1, L2, LogSum, LogSumExp, Extremum, Prod };

GradientRule reduce_with(Reduction r) {
  return [r](GradEmitter& e) {
    if (!e.needs_grad(0)) return;
    const std::string g = e.grad_of_output(0), x = e.input(0), y = e.output(0);
    auto times = [&](const std::string& a, const std::string& b) { return e.emit1("Mul", {a, b}); };
    std::string dx;
    switch (r) {
      case Reduction::SumSquare:  // d sum(x^2) = 2x
        dx = times(spread(e, e.scale(g, 2.0f), false), x);
        break;
      case Reduction::L1:  // d sum|x| = sign(x)
        dx = times(spread(e, g, false), e.emit1("Sign", {x}));
        break;
      case Reduction::L2:  // d sqrt(sum x^2) = x / y
        dx = times(spread(e, e.emit1("Div", {g, y}), false), x);
        break;
      case Reduction::LogSum:  // d log(sum x) = 1 / sum x = 1 / exp(y)
        dx = spread(e, e.emit1("Div", {g, e.emit1("Exp", {y})}), false);
        break;
      case Reduction::LogSumExp:  // d log(sum exp x) = exp(x - y)
        dx = times(spread(e, g, false), e.emit1("Exp", {e.emit1("Sub", {x, spread(e, y, false)})}));
        break;
      case Reduction::Extremum: {  // to the elements equal to the result (each, on a tie)
        const std::string hit =
            e.emit1("CastLike", {e.emit1("Equal", {x, spread(e, y, false)}), g});
        dx = times(spread(e, g, false), hit);
        break;
      }
      case Reduction::Prod:  // d prod(x) = prod(x) / x: an element that is 0 gets inf or NaN
        dx = e.emit1("Div", {spread(e, times(g, y), false), x});
        break;
    }
    e.set_grad(0, dx);
  };
}

GradientRule softmax(bool log) {
  return [log](GradEmitter& e) {
    if (!e.needs_grad(0)) return;
    const Node& n = e.node();
    e.set_grad(0, e.emit1("SoftmaxGrad", {e.grad_of_output(0), e.output(0)},
                          {{"axis", int_attr(n.attr_int("axis", n.opset < 13 ? 1 : -1))},
                           {"log", int_attr(log)},
                           {"coerced", int_attr(n.opset < 13)}},
                          kVoltDomain));
  };
}

GradientRule loss(bool softmax_first) {
  return [softmax_first](GradEmitter& e) {
    if (!e.needs_grad(0)) return;
    const Node& n = e.node();
    std::map<std::string, Attribute> attrs{
        {"reduction", string_attr(n.attr_string("reduction", "mean"))},
        {"softmax", int_attr(softmax_first)}};
    if (n.has_attr("ignore_index")) attrs["ignore_index"] = int_attr(n.attr_int("ignore_index"));
    std::vector<std::string> ins{e.grad_of_output(0), e.input(0), e.input(1)};
    if (n.has_input(2)) ins.push_back(e.input(2));
    e.set_grad(0, e.emit1("LossGrad", ins, attrs, kVoltDomain));
  };
}

}  // namespace

VOLT_REGISTER_GRADIENT_OF(reduce_sum, "ReduceSum", ({0}), reduce(false));
VOLT_REGISTER_GRADIENT_OF(reduce_mean, "ReduceMean", ({0}), reduce(true));
VOLT_REGISTER_GRADIENT_OF(reduce_sum_square, "ReduceSumSquare", ({0}),
                          reduce_with(Reduction::SumSquare));
VOLT_REGISTER_GRADIENT_OF(reduce_l1, "ReduceL1", ({0}), reduce_with(Reduction::L1));
VOLT_REGISTER_GRADIENT_OF(reduce_l2, "ReduceL2", ({0}), reduce_with(Reduction::L2));
VOLT_REGISTER_GRADIENT_OF(reduce_log_sum, "ReduceLogSum", ({0}), reduce_with(Reduction::LogSum));
VOLT_REGISTER_GRADIENT_OF(reduce_log_sum_exp, "ReduceLogSumExp", ({0}),
                          reduce_with(Reduction::LogSumExp));
VOLT_REGISTER_GRADIENT_OF(reduce_max, "ReduceMax", ({0}), reduce_with(Reduction::Extremum));
VOLT_REGISTER_GRADIENT_OF(reduce_min, "ReduceMin", ({0}), reduce_with(Reduction::Extremum));
VOLT_REGISTER_GRADIENT_OF(reduce_prod, "ReduceProd", ({0}), reduce_with(Reduction::Prod));
VOLT_REGISTER_GRADIENT(softmax, "Softmax", softmax(false));
VOLT_REGISTER_GRADIENT(log_softmax, "LogSoftmax", softmax(true));
VOLT_REGISTER_GRADIENT_OF(sce_loss, "SoftmaxCrossEntropyLoss", ({0}), loss(true));
VOLT_REGISTER_GRADIENT_OF(nll_loss, "NegativeLogLikelihoodLoss", ({0}), loss(false));

}  // namespace volt
