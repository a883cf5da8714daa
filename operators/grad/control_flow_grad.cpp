// Gradient rule of If: the gradient of the branch taken at run time. The forward If keeps none
// of its branch's intermediate values, so the backward node is an If on the same condition whose
// branches recompute their forward half and differentiate it; each branch returns the gradients
// of the values the branches capture from the enclosing graph (zeros for one it does not read).
// Loop and Scan have no rule yet: a gradient that reaches one is an error, never a silent zero.
#include "operators/grad/gradient_rule.hpp"
#include "runtime/error.hpp"

namespace volt {
namespace {

// One branch: its forward nodes, their backward nodes, and an output per wanted capture.
std::shared_ptr<Graph> backward_branch(GradEmitter& e, const char* key,
                                       const std::vector<std::string>& wanted) {
  const Node& n = e.node();
  const std::shared_ptr<Graph> forward = n.attr_graph(key);
  VOLT_CHECK(forward, InvalidModel, n.describe() + ": If has no " + key);
  VOLT_CHECK(forward->outputs.size() >= n.outputs.size(), InvalidModel,
             n.describe() + ": the " + key + " has fewer outputs than the node");
  auto body = std::make_shared<Graph>(*forward);
  const std::string prefix = "grad/" + n.name + "/" + key + "/";
  GradientRequest req;
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    const std::string seed = e.grad_of_output(i);
    if (seed.empty()) continue;  // the seeds are the outer graph's values, which branches see
    if (req.y.empty()) {
      req.y = forward->outputs[i].name;
      req.seed = seed;
    } else {
      req.also.emplace_back(forward->outputs[i].name, seed);
    }
  }
  req.wrt = wanted;
  req.prefix = prefix;
  const std::vector<std::string> grads = e.differentiate(*body, req);
  // Outputs of their own (a gradient may be an outer value, or the same one twice).
  body->outputs.clear();
  for (size_t j = 0; j < grads.size(); ++j) {
    Node id;
    id.name = prefix + "out" + std::to_string(j);
    id.op_type = "Identity";
    id.opset = 13;
    id.inputs = {grads[j]};
    id.outputs = {id.name};
    ValueInfo out;
    out.name = id.name;
    body->outputs.push_back(out);
    body->nodes.push_back(std::move(id));
  }
  return body;
}

void if_rule(GradEmitter& e) {
  std::vector<std::string> wanted;
  for (const auto& c : e.captures())
    if (e.needs_grad_of(c)) wanted.push_back(c);
  if (wanted.empty()) return;
  std::map<std::string, Attribute> attrs;
  for (const char* key : {"then_branch", "else_branch"}) {
    Attribute a;
    a.type = Attribute::Type::Graph;
    a.g = backward_branch(e, key, wanted);
    attrs[key] = a;
  }
  const auto grads = e.emit("If", {e.input(0)}, std::move(attrs), wanted.size());
  for (size_t j = 0; j < wanted.size(); ++j) e.add_grad(wanted[j], grads[j]);
}

}  // namespace

// The condition carries no gradient; the captured values do.
VOLT_REGISTER_GRADIENT_OF(if_, "If", ({}, true), if_rule);

}  // namespace volt
