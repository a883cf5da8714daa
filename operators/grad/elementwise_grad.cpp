// Gradient rules of elementwise ops. Broadcast inputs get their gradient summed back to their
// own shape (SumToShape). Unary ops use volt's EltwiseGrad kernel, which knows each derivative.
#include "operators/grad/gradient_rule.hpp"

namespace volt {
namespace {

void add_sub(GradEmitter& e, bool subtract) {
  const std::string g = e.grad_of_output(0);
  if (e.needs_grad(0)) e.set_grad(0, e.sum_to(g, e.input(0)));
  if (e.needs_grad(1)) e.set_grad(1, e.sum_to(subtract ? e.emit1("Neg", {g}) : g, e.input(1)));
}

void mul(GradEmitter& e) {
  const std::string g = e.grad_of_output(0);
  if (e.needs_grad(0)) e.set_grad(0, e.sum_to(e.emit1("Mul", {g, e.input(1)}), e.input(0)));
  if (e.needs_grad(1)) e.set_grad(1, e.sum_to(e.emit1("Mul", {g, e.input(0)}), e.input(1)));
}

void div(GradEmitter& e) {
  const std::string g = e.grad_of_output(0);
  if (e.needs_grad(0)) e.set_grad(0, e.sum_to(e.emit1("Div", {g, e.input(1)}), e.input(0)));
  // d(a/b)/db = -y / b
  if (e.needs_grad(1))
    e.set_grad(
        1,
        e.sum_to(e.emit1("Neg", {e.emit1("Div", {e.emit1("Mul", {g, e.output(0)}), e.input(1)})}),
                 e.input(1)));
}

void pow_rule(GradEmitter& e) {
  const std::string g = e.grad_of_output(0);
  for (int64_t wrt : {0, 1}) {
    if (!e.needs_grad(static_cast<size_t>(wrt))) continue;
    const std::string d = e.emit1("PowGrad", {g, e.input(0), e.input(1), e.output(0)},
                                  {{"wrt", int_attr(wrt)}}, kVoltDomain);
    e.set_grad(static_cast<size_t>(wrt), e.sum_to(d, e.input(static_cast<size_t>(wrt))));
  }
}

// y = f(x): dx = dy * f'(x), computed by EltwiseGrad from x and y.
GradientRule unary(const std::string& fn) {
  return [fn](GradEmitter& e) {
    if (!e.needs_grad(0)) return;
    std::map<std::string, Attribute> attrs{{"fn", string_attr(fn)}};
    for (const char* key : {"alpha", "beta", "gamma"})
      if (const Attribute* a = e.node().find_attr(key, Attribute::Type::Float)) attrs[key] = *a;
    if (fn == "Gelu")
      attrs["approximate"] = string_attr(e.node().attr_string("approximate", "none"));
    e.set_grad(0, e.emit1("EltwiseGrad", {e.grad_of_output(0), e.input(0), e.output(0)}, attrs,
                          kVoltDomain));
  };
}

void neg(GradEmitter& e) {
  if (e.needs_grad(0)) e.set_grad(0, e.emit1("Neg", {e.grad_of_output(0)}));
}

void sum(GradEmitter& e) {
  for (size_t i = 0; i < e.node().inputs.size(); ++i)
    if (e.needs_grad(i)) e.set_grad(i, e.sum_to(e.grad_of_output(0), e.input(i)));
}

void where(GradEmitter& e) {
  const std::string g = e.grad_of_output(0);
  for (size_t i : {size_t{1}, size_t{2}}) {
    if (!e.needs_grad(i)) continue;
    const std::string masked =
        e.emit1("Mask", {g, e.input(0)}, {{"invert", int_attr(i == 2)}}, kVoltDomain);
    e.set_grad(i, e.sum_to(masked, e.input(i)));
  }
}

void clip(GradEmitter& e) {
  if (!e.needs_grad(0)) return;
  // The gradient passes where the output equals the input (inside the bounds).
  e.set_grad(0, e.emit1("EltwiseGrad", {e.grad_of_output(0), e.input(0), e.output(0)},
                        {{"fn", string_attr("Clip")}}, kVoltDomain));
}

}  // namespace

VOLT_REGISTER_GRADIENT(add, "Add", [](GradEmitter& e) { add_sub(e, false); });
VOLT_REGISTER_GRADIENT(sub, "Sub", [](GradEmitter& e) { add_sub(e, true); });
VOLT_REGISTER_GRADIENT(mul, "Mul", mul);
VOLT_REGISTER_GRADIENT(div, "Div", div);
VOLT_REGISTER_GRADIENT(pow, "Pow", pow_rule);
VOLT_REGISTER_GRADIENT(neg, "Neg", neg);
VOLT_REGISTER_GRADIENT(sum, "Sum", sum);
VOLT_REGISTER_GRADIENT(where, "Where", where);
VOLT_REGISTER_GRADIENT(clip, "Clip", clip);
VOLT_REGISTER_GRADIENT(relu, "Relu", unary("Relu"));
VOLT_REGISTER_GRADIENT(leaky_relu, "LeakyRelu", unary("LeakyRelu"));
VOLT_REGISTER_GRADIENT(elu, "Elu", unary("Elu"));
VOLT_REGISTER_GRADIENT(sigmoid, "Sigmoid", unary("Sigmoid"));
VOLT_REGISTER_GRADIENT(tanh, "Tanh", unary("Tanh"));
VOLT_REGISTER_GRADIENT(exp, "Exp", unary("Exp"));
VOLT_REGISTER_GRADIENT(log, "Log", unary("Log"));
VOLT_REGISTER_GRADIENT(sqrt, "Sqrt", unary("Sqrt"));
VOLT_REGISTER_GRADIENT(reciprocal, "Reciprocal", unary("Reciprocal"));
VOLT_REGISTER_GRADIENT(erf, "Erf", unary("Erf"));
VOLT_REGISTER_GRADIENT(gelu, "Gelu", unary("Gelu"));
VOLT_REGISTER_GRADIENT(softplus, "Softplus", unary("Softplus"));
VOLT_REGISTER_GRADIENT(abs, "Abs", unary("Abs"));
VOLT_REGISTER_GRADIENT(sin, "Sin", unary("Sin"));
VOLT_REGISTER_GRADIENT(cos, "Cos", unary("Cos"));

}  // namespace volt
