#include "operators/common/grad_fn.hpp"

#include <map>
#include <string>

#include "runtime/error.hpp"
#include "runtime/graph.hpp"

namespace volt {

GradFn grad_fn_of(const Node& n) {
  static const std::map<std::string, GradFn> names = {{"Relu", GradFn::Relu},
                                                      {"LeakyRelu", GradFn::LeakyRelu},
                                                      {"Elu", GradFn::Elu},
                                                      {"Sigmoid", GradFn::Sigmoid},
                                                      {"Tanh", GradFn::Tanh},
                                                      {"Exp", GradFn::Exp},
                                                      {"Log", GradFn::Log},
                                                      {"Sqrt", GradFn::Sqrt},
                                                      {"Reciprocal", GradFn::Reciprocal},
                                                      {"Erf", GradFn::Erf},
                                                      {"Softplus", GradFn::Softplus},
                                                      {"Abs", GradFn::Abs},
                                                      {"Sin", GradFn::Sin},
                                                      {"Cos", GradFn::Cos},
                                                      {"Clip", GradFn::Clip},
                                                      {"Gelu", GradFn::Gelu},
                                                      {"HardSigmoid", GradFn::HardSigmoid},
                                                      {"HardSwish", GradFn::HardSwish},
                                                      {"Celu", GradFn::Celu},
                                                      {"Softsign", GradFn::Softsign},
                                                      {"ThresholdedRelu", GradFn::ThresholdedRelu},
                                                      {"Shrink", GradFn::Shrink},
                                                      {"Tan", GradFn::Tan},
                                                      {"Asin", GradFn::Asin},
                                                      {"Acos", GradFn::Acos},
                                                      {"Atan", GradFn::Atan},
                                                      {"Sinh", GradFn::Sinh},
                                                      {"Cosh", GradFn::Cosh},
                                                      {"Asinh", GradFn::Asinh},
                                                      {"Acosh", GradFn::Acosh},
                                                      {"Atanh", GradFn::Atanh}};
  const std::string f = n.attr_string("fn", "");
  auto it = names.find(f);
  VOLT_CHECK(it != names.end(), InvalidModel, n.describe() + ": no derivative for '" + f + "'");
  if (it->second == GradFn::Gelu && n.attr_string("approximate", "none") == "tanh")
    return GradFn::GeluTanh;
  return it->second;
}

float grad_fn_alpha(const Node& n, GradFn f) {
  const float fallback = f == GradFn::LeakyRelu     ? 0.01f
                         : f == GradFn::HardSigmoid ? 0.2f
                         : f == GradFn::Shrink      ? 0.5f
                                                    : 1.0f;
  return n.attr_float("alpha", fallback);
}

}  // namespace volt
