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

// Shrink's threshold is `lambd`; EltwiseGrad reads it as alpha.
void shrink(GradEmitter& e) {
  if (!e.needs_grad(0)) return;
  e.set_grad(0, e.emit1("EltwiseGrad", {e.grad_of_output(0), e.input(0), e.output(0)},
                        {{"fn", string_attr("Shrink")},
                         {"alpha", float_attr(e.node().attr_float("lambd", 0.5f))}},
                        kVoltDomain));
}

// Selu is gamma * Elu(x; alpha): dx = gamma * Elu'(x, y / gamma).
void selu(GradEmitter& e) {
  if (!e.needs_grad(0)) return;
  const float alpha = e.node().attr_float("alpha", 1.67326319217681884765625f),
              gamma = e.node().attr_float("gamma", 1.05070102214813232421875f);
  const std::string d =
      e.emit1("EltwiseGrad", {e.grad_of_output(0), e.input(0), e.scale(e.output(0), 1 / gamma)},
              {{"fn", string_attr("Elu")}, {"alpha", float_attr(alpha)}}, kVoltDomain);
  e.set_grad(0, e.scale(d, gamma));
}

// Max and Min: the gradient goes to the inputs equal to the result (to each of them on a tie).
void extremum(GradEmitter& e) {
  const std::string g = e.grad_of_output(0);
  for (size_t i = 0; i < e.node().inputs.size(); ++i) {
    if (!e.needs_grad(i)) continue;
    const std::string hit = e.emit1("CastLike", {e.emit1("Equal", {e.input(i), e.output(0)}), g});
    e.set_grad(i, e.sum_to(e.emit1("Mul", {g, hit}), e.input(i)));
  }
}

void mean(GradEmitter& e) {
  const size_t n = e.node().inputs.size();
  const std::string g = e.scale(e.grad_of_output(0), 1.0f / static_cast<float>(n));
  for (size_t i = 0; i < n; ++i)
    if (e.needs_grad(i)) e.set_grad(i, e.sum_to(g, e.input(i)));
}

// y = x > 0 ? x : slope * x (slope broadcast to x).
void prelu(GradEmitter& e) {
  const std::string g = e.grad_of_output(0), x = e.input(0), slope = e.input(1);
  const std::string zero = e.emit1("CastLike", {e.constant(Tensor::scalar(0.0f)), x});
  const std::string positive = e.emit1("Greater", {x, zero});
  if (e.needs_grad(0)) e.set_grad(0, e.emit1("Where", {positive, g, e.emit1("Mul", {g, slope})}));
  if (e.needs_grad(1))
    e.set_grad(1, e.sum_to(e.emit1("Where", {positive, zero, e.emit1("Mul", {g, x})}), slope));
}

// Mod(a, b) = a - b * trunc(a / b) (fmod) or its floored form: da = dy almost everywhere; the
// schema differentiates a only.
void mod(GradEmitter& e) {
  if (e.needs_grad(0)) e.set_grad(0, e.sum_to(e.grad_of_output(0), e.input(0)));
}

}  // namespace

VOLT_REGISTER_GRADIENT(add, "Add", [](GradEmitter& e) { add_sub(e, false); });
VOLT_REGISTER_GRADIENT(sub, "Sub", [](GradEmitter& e) { add_sub(e, true); });
VOLT_REGISTER_GRADIENT(mul, "Mul", mul);
VOLT_REGISTER_GRADIENT(div, "Div", div);
VOLT_REGISTER_GRADIENT(pow, "Pow", pow_rule);
VOLT_REGISTER_GRADIENT(neg, "Neg", neg);
VOLT_REGISTER_GRADIENT(sum, "Sum", sum);
VOLT_REGISTER_GRADIENT_OF(where, "Where", ({1, 2}), where);
VOLT_REGISTER_GRADIENT_OF(clip, "Clip", ({0}), clip);
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
VOLT_REGISTER_GRADIENT(tan, "Tan", unary("Tan"));
VOLT_REGISTER_GRADIENT(asin, "Asin", unary("Asin"));
VOLT_REGISTER_GRADIENT(acos, "Acos", unary("Acos"));
VOLT_REGISTER_GRADIENT(atan, "Atan", unary("Atan"));
VOLT_REGISTER_GRADIENT(sinh, "Sinh", unary("Sinh"));
VOLT_REGISTER_GRADIENT(cosh, "Cosh", unary("Cosh"));
VOLT_REGISTER_GRADIENT(asinh, "Asinh", unary("Asinh"));
VOLT_REGISTER_GRADIENT(acosh, "Acosh", unary("Acosh"));
VOLT_REGISTER_GRADIENT(atanh, "Atanh", unary("Atanh"));
VOLT_REGISTER_GRADIENT(hard_sigmoid, "HardSigmoid", unary("HardSigmoid"));
VOLT_REGISTER_GRADIENT(hard_swish, "HardSwish", unary("HardSwish"));
VOLT_REGISTER_GRADIENT(celu, "Celu", unary("Celu"));
VOLT_REGISTER_GRADIENT(softsign, "Softsign", unary("Softsign"));
VOLT_REGISTER_GRADIENT(thresholded_relu, "ThresholdedRelu", unary("ThresholdedRelu"));
VOLT_REGISTER_GRADIENT(shrink, "Shrink", shrink);
VOLT_REGISTER_GRADIENT(selu, "Selu", selu);
VOLT_REGISTER_GRADIENT(max, "Max", extremum);
VOLT_REGISTER_GRADIENT(min, "Min", extremum);
VOLT_REGISTER_GRADIENT(mean, "Mean", mean);
VOLT_REGISTER_GRADIENT(prelu, "PRelu", prelu);
VOLT_REGISTER_GRADIENT_OF(mod, "Mod", ({0}), mod);

// Derivatives zero almost everywhere, or outputs that are not numbers a gradient could follow.
VOLT_REGISTER_ZERO_GRADIENT(floor, "Floor");
VOLT_REGISTER_ZERO_GRADIENT(ceil, "Ceil");
VOLT_REGISTER_ZERO_GRADIENT(round, "Round");
VOLT_REGISTER_ZERO_GRADIENT(sign, "Sign");
VOLT_REGISTER_ZERO_GRADIENT(hardmax, "Hardmax");
VOLT_REGISTER_ZERO_GRADIENT(equal, "Equal");
VOLT_REGISTER_ZERO_GRADIENT(less, "Less");
VOLT_REGISTER_ZERO_GRADIENT(less_or_equal, "LessOrEqual");
VOLT_REGISTER_ZERO_GRADIENT(greater, "Greater");
VOLT_REGISTER_ZERO_GRADIENT(greater_or_equal, "GreaterOrEqual");
VOLT_REGISTER_ZERO_GRADIENT(is_nan, "IsNaN");
VOLT_REGISTER_ZERO_GRADIENT(is_inf, "IsInf");
VOLT_REGISTER_ZERO_GRADIENT(arg_max, "ArgMax");
VOLT_REGISTER_ZERO_GRADIENT(arg_min, "ArgMin");
VOLT_REGISTER_ZERO_GRADIENT(shape, "Shape");
VOLT_REGISTER_ZERO_GRADIENT(size, "Size");
VOLT_REGISTER_ZERO_GRADIENT(non_zero, "NonZero");
VOLT_REGISTER_ZERO_GRADIENT(eye_like, "EyeLike");
VOLT_REGISTER_ZERO_GRADIENT(random_normal_like, "RandomNormalLike");
VOLT_REGISTER_ZERO_GRADIENT(random_uniform_like, "RandomUniformLike");
VOLT_REGISTER_ZERO_GRADIENT(bernoulli, "Bernoulli");
VOLT_REGISTER_ZERO_GRADIENT(multinomial, "Multinomial");

}  // namespace volt
