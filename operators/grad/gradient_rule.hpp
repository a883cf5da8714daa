// Gradient rules: for each op, how to build the backward nodes that turn the gradients of its
// outputs into gradients of its inputs. Rules emit ordinary graph nodes (standard ONNX ops and
// volt's own backward kernels in the "ai.volt" domain), so the backward graph is planned,
// memory-planned and run like any other. The engine that walks the graph is
// runtime/training/autodiff.cpp.
#pragma once
#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "operators/registry.hpp"
#include "runtime/graph.hpp"

namespace volt {

// What to differentiate: y (seeded with dL/dy, "" meaning ones shaped like y; more outputs and
// their seeds in `also`) with respect to `wrt`. Backward nodes are named from `prefix`.
struct GradientRequest {
  std::string y;
  std::string seed;
  std::vector<std::string> wrt;
  std::vector<std::pair<std::string, std::string>> also = {};
  std::string prefix = "grad/";
  // One more output to differentiate, seeded with `g` (the first fills y and seed).
  void seed_output(const std::string& out, const std::string& g) {
    if (y.empty()) {
      y = out;
      seed = g;
    } else {
      also.emplace_back(out, g);
    }
  }
};

class GradEmitter {
 public:
  virtual ~GradEmitter() = default;
  virtual const Node& node() const = 0;
  // Names of the forward node's values ("" for an omitted one).
  std::string input(size_t i) const {
    return i < node().inputs.size() ? node().inputs[i] : std::string();
  }
  std::string output(size_t i) const {
    return i < node().outputs.size() ? node().outputs[i] : std::string();
  }
  // The gradient flowing into output i; "" when none does.
  virtual std::string grad_of_output(size_t i) const = 0;
  // Whether input i leads back to a value a gradient is asked for (others need none).
  virtual bool needs_grad(size_t i) const = 0;
  virtual void set_grad(size_t i, const std::string& grad) = 0;
  // The static shape of a value when the model fixes it (initializers, annotated values).
  virtual std::optional<Shape> static_shape(const std::string& value) const = 0;
  // Adds a node; returns its output names.
  virtual std::vector<std::string> emit(const std::string& op,
                                        const std::vector<std::string>& inputs,
                                        std::map<std::string, Attribute> attrs = {},
                                        size_t outputs = 1,
                                        const std::string& domain = kOnnxDomain) = 0;
  // Adds an initializer holding `t`.
  virtual std::string constant(const Tensor& t) = 0;

  // Values the node's subgraphs read from the enclosing scopes (If, Loop, Scan bodies).
  virtual std::vector<std::string> captures() const = 0;
  // Whether a captured value leads back to a value a gradient is asked for; adds to its gradient.
  virtual bool needs_grad_of(const std::string& value) const = 0;
  virtual void add_grad(const std::string& value, const std::string& grad) = 0;
  // Differentiates a subgraph of the node (a copy the rule owns): appends the backward nodes to
  // `body` and returns the gradients of `request.wrt` (see runtime/training/autodiff.hpp).
  virtual std::vector<std::string> differentiate(Graph& body, const GradientRequest& request) = 0;

  // Helpers.
  std::string emit1(const std::string& op, const std::vector<std::string>& inputs,
                    std::map<std::string, Attribute> attrs = {},
                    const std::string& domain = kOnnxDomain) {
    return emit(op, inputs, std::move(attrs), 1, domain)[0];
  }
  std::string shape_of(const std::string& v) { return emit1("Shape", {v}); }
  // Sums `g` down to the shape of `like` (undoing numpy broadcasting).
  std::string sum_to(const std::string& g, const std::string& like) {
    return emit1("SumToShape", {g, shape_of(like)}, {}, kVoltDomain);
  }
  std::string scale(const std::string& x, float s) {
    Attribute a;
    a.type = Attribute::Type::Float;
    a.f = s;
    return emit1("Scale", {x}, {{"scale", a}}, kVoltDomain);
  }
};

using GradientRule = std::function<void(GradEmitter&)>;

// Which inputs of an op carry a gradient. Shapes, indices, axes, conditions and the like do not
// (a value that reaches the loss only through them is not trainable); neither do the inputs of
// ops whose derivative is zero almost everywhere (Floor, Sign, comparisons). A rule must give a
// gradient to every differentiable input that needs one: autodiff checks it.
struct Differentiable {
  static Differentiable all() { return {true, {}, false}; }
  static Differentiable inputs(std::vector<size_t> listed, bool captures = false) {
    return {false, std::move(listed), captures};
  }
  // Inputs `first` and after (a variadic tail, as Loop's carried values).
  static Differentiable from(size_t first, bool captures = false) {
    return {false, {}, captures, first};
  }
  static Differentiable none() { return {false, {}, false}; }
  static Differentiable all_and_captured() { return {true, {}, true}; }
  bool input(size_t i) const {
    return every || i >= tail || std::find(listed.begin(), listed.end(), i) != listed.end();
  }
  bool every = true;
  std::vector<size_t> listed;
  bool captured = false;  // values the node's subgraphs capture (If, Loop)
  size_t tail = static_cast<size_t>(-1);
};

struct GradientRuleEntry {
  GradientRule rule;
  Differentiable differentiable;
};

// Registration at the bottom of each rule file, like kernels.
void register_gradient_rule(const std::string& domain, const std::string& op, GradientRule rule,
                            Differentiable differentiable = Differentiable::all());
const GradientRuleEntry* find_gradient_rule(const std::string& domain, const std::string& op);
// Every registered (domain, op), for the tests that enumerate them.
std::vector<std::pair<std::string, std::string>> gradient_rule_ops();

struct GradientRuleRegistrar {
  GradientRuleRegistrar(const std::string& domain, const std::string& op, GradientRule rule,
                        Differentiable differentiable = Differentiable::all()) {
    register_gradient_rule(domain, op, std::move(rule), std::move(differentiable));
  }
};
// A rule whose every input is differentiable.
#define VOLT_REGISTER_GRADIENT(id, op, ...)                                 \
  static const ::volt::GradientRuleRegistrar volt_gradient_registrar_##id { \
    ::volt::kOnnxDomain, op, __VA_ARGS__                                    \
  }
// A rule for the listed inputs only: VOLT_REGISTER_GRADIENT_OF(id, op, {0, 2}, rule).
#define VOLT_REGISTER_GRADIENT_OF(id, op, listed, ...)                          \
  static const ::volt::GradientRuleRegistrar volt_gradient_registrar_##id {     \
    ::volt::kOnnxDomain, op, __VA_ARGS__, ::volt::Differentiable::inputs listed \
  }
// An op whose derivative is zero almost everywhere (or whose outputs are not numbers): declared,
// so that it is neither an error nor a path for gradients.
#define VOLT_REGISTER_ZERO_GRADIENT(id, op)                                              \
  static const ::volt::GradientRuleRegistrar volt_gradient_registrar_##id {              \
    ::volt::kOnnxDomain, op, [](::volt::GradEmitter&) {}, ::volt::Differentiable::none() \
  }

// A node of the default domain, for rules that build subgraphs and for the trainer's loss.
inline Node make_node(const std::string& name, const std::string& op, std::vector<std::string> ins,
                      std::vector<std::string> outs, std::map<std::string, Attribute> attrs = {}) {
  Node n;
  n.name = name;
  n.op_type = op;
  n.opset = 13;
  n.inputs = std::move(ins);
  n.outputs = std::move(outs);
  n.attributes = std::move(attrs);
  return n;
}

}  // namespace volt
