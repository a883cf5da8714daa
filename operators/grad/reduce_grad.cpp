// Gradient rules of reductions, Softmax/LogSoftmax and the loss ops.
#include "operators/grad/gradient_rule.hpp"

namespace volt {
namespace {

GradientRule reduce(bool mean) {
  return [mean](GradEmitter& e) {
    if (!e.needs_grad(0)) return;
    const Node& n = e.node();
    std::map<std::string, Attribute> attrs{
        {"keepdims", int_attr(n.attr_int("keepdims", 1))},
        {"noop_with_empty_axes", int_attr(n.attr_int("noop_with_empty_axes", 0))},
        {"mean", int_attr(mean)}};
    std::vector<std::string> ins{e.grad_of_output(0), e.shape_of(e.input(0))};
    if (n.has_input(1))
      ins.push_back(e.input(1));
    else if (n.has_attr("axes"))
      attrs["axes"] = ints_attr(n.attr_ints("axes"));
    e.set_grad(0, e.emit1("ReduceGrad", ins, attrs, kVoltDomain));
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

VOLT_REGISTER_GRADIENT(reduce_sum, "ReduceSum", reduce(false));
VOLT_REGISTER_GRADIENT(reduce_mean, "ReduceMean", reduce(true));
VOLT_REGISTER_GRADIENT(softmax, "Softmax", softmax(false));
VOLT_REGISTER_GRADIENT(log_softmax, "LogSoftmax", softmax(true));
VOLT_REGISTER_GRADIENT(sce_loss, "SoftmaxCrossEntropyLoss", loss(true));
VOLT_REGISTER_GRADIENT(nll_loss, "NegativeLogLikelihoodLoss", loss(false));

}  // namespace volt
