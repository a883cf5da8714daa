// Gradient rules of ops that move data: views (Reshape family), Transpose, Concat, Split,
// Gather, Expand, Cast, Identity, Dropout.
#include "operators/grad/gradient_rule.hpp"

namespace volt {
namespace {

void pass_through(GradEmitter& e) {
  if (e.needs_grad(0)) e.set_grad(0, e.emit1("Identity", {e.grad_of_output(0)}));
}

void reshape_back(GradEmitter& e) {
  if (e.needs_grad(0))
    e.set_grad(0, e.emit1("Reshape", {e.grad_of_output(0), e.shape_of(e.input(0))}));
}

void transpose(GradEmitter& e) {
  if (!e.needs_grad(0)) return;
  const auto perm = e.node().attr_ints("perm");
  std::map<std::string, Attribute> attrs;
  if (!perm.empty()) {  // the inverse permutation; without perm the transpose reverses, its own
                        // inverse
    std::vector<int64_t> inv(perm.size());
    for (size_t i = 0; i < perm.size(); ++i)
      inv[static_cast<size_t>(perm[i] < 0 ? perm[i] + static_cast<int64_t>(perm.size())
                                          : perm[i])] = static_cast<int64_t>(i);
    attrs["perm"] = ints_attr(inv);
  }
  e.set_grad(0, e.emit1("Transpose", {e.grad_of_output(0)}, attrs));
}

void concat(GradEmitter& e) {
  const int64_t axis = e.node().attr_int("axis");
  const size_t n = e.node().inputs.size();
  std::vector<std::string> sizes;
  const std::string axis_index = e.constant(Tensor::from<int64_t>({axis}, {1}));
  for (size_t i = 0; i < n; ++i)
    sizes.push_back(e.emit1("Gather", {e.shape_of(e.input(i)), axis_index}));
  const std::string split = e.emit1("Concat", sizes, {{"axis", int_attr(0)}});
  const auto parts = e.emit("Split", {e.grad_of_output(0), split}, {{"axis", int_attr(axis)}}, n);
  for (size_t i = 0; i < n; ++i)
    if (e.needs_grad(i)) e.set_grad(i, parts[i]);
}

void split(GradEmitter& e) {
  if (!e.needs_grad(0)) return;
  std::vector<std::string> parts;
  for (size_t i = 0; i < e.node().outputs.size(); ++i) {
    const std::string g = e.grad_of_output(i);
    parts.push_back(g.empty() ? e.emit1("ZerosLike", {e.output(i)}, {}, kVoltDomain) : g);
  }
  e.set_grad(0, e.emit1("Concat", parts, {{"axis", int_attr(e.node().attr_int("axis", 0))}}));
}

void gather(GradEmitter& e) {
  if (!e.needs_grad(0)) return;
  e.set_grad(0, e.emit1("GatherGrad", {e.grad_of_output(0), e.input(1), e.shape_of(e.input(0))},
                        {{"axis", int_attr(e.node().attr_int("axis", 0))}}, kVoltDomain));
}

void expand(GradEmitter& e) {
  if (e.needs_grad(0)) e.set_grad(0, e.sum_to(e.grad_of_output(0), e.input(0)));
}

void cast(GradEmitter& e) {
  if (e.needs_grad(0)) e.set_grad(0, e.emit1("CastLike", {e.grad_of_output(0), e.input(0)}));
}

void dropout(GradEmitter& e) {
  if (!e.needs_grad(0)) return;
  // Training mode scales kept elements by 1/(1-ratio) and zeroes the rest: so does the gradient.
  if (e.node().has_input(2) && e.node().has_output(1)) {
    e.set_grad(
        0, e.emit1("DropoutGrad", {e.grad_of_output(0), e.output(1), e.input(1)}, {}, kVoltDomain));
    return;
  }
  pass_through(e);
}

}  // namespace

VOLT_REGISTER_GRADIENT(identity, "Identity", pass_through);
VOLT_REGISTER_GRADIENT(reshape, "Reshape", reshape_back);
VOLT_REGISTER_GRADIENT(flatten, "Flatten", reshape_back);
VOLT_REGISTER_GRADIENT(squeeze, "Squeeze", reshape_back);
VOLT_REGISTER_GRADIENT(unsqueeze, "Unsqueeze", reshape_back);
VOLT_REGISTER_GRADIENT(transpose, "Transpose", transpose);
VOLT_REGISTER_GRADIENT(concat, "Concat", concat);
VOLT_REGISTER_GRADIENT(split, "Split", split);
VOLT_REGISTER_GRADIENT(gather, "Gather", gather);
VOLT_REGISTER_GRADIENT(expand, "Expand", expand);
VOLT_REGISTER_GRADIENT(cast, "Cast", cast);
VOLT_REGISTER_GRADIENT(dropout, "Dropout", dropout);

}  // namespace volt
