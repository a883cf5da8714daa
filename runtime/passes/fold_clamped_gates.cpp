// Piecewise-linear gates written out as elementwise chains become the ops they are, so that the
// activation fusions (and the kernels' single passes over memory) take them. A clamped affine
// function of a value v, s * Clip(a * v + b, 0, hi), the affine part any chain of Add, Sub, Mul
// and Div by scalar constants and s any such Mul and Div after the Clip, is
// s * hi * HardSigmoid(v; a / hi, b / hi). When s * hi is 1 it becomes a HardSigmoid node; when
// it multiplies v itself (then times scalars t with s * hi * t = 1) it is v * HardSigmoid(v),
// and with HardSigmoid's parameters 1/6 and 1/2 one HardSwish node. What converters write for
// HardSwish (x * Clip(x + 3, 0, 6) / 6) and HardSigmoid (Clip(x / 6 + 0.5, 0, 1)) is covered
// without naming either; gates with other constants are rewritten by the same arithmetic.
// Intermediate values must have no reader but the chain and not be graph outputs.
#include <cmath>

#include "runtime/passes/passes.hpp"

namespace volt {
namespace {

// A Add/Sub/Mul/Div of the value `x` and a scalar constant: its effect on a * x + b.
struct ScalarStep {
  std::string x;  // the other input
  char op;        // + - * /
  float c;
};

// A constant of one element that leaves the shape of what it is combined with as it is: rank 0,
// or a rank that the other operand's declared rank covers (a [1, 1, 1] constant would raise the
// rank of a vector).
std::optional<float> shape_keeping_scalar(const Graph& g, const std::string& c,
                                          const std::string& other) {
  const Tensor* t = constant_value(g, c);
  if (!t || t->numel() != 1) return std::nullopt;
  if (t->rank() > 0 && declared_rank(g, other) < static_cast<int>(t->rank())) return std::nullopt;
  auto v = constant_scalar(g, c);
  return v && std::isfinite(*v) ? v : std::nullopt;
}

std::optional<ScalarStep> scalar_step(const Graph& g, const Node& n) {
  if (n.inputs.size() != 2 || n.outputs.size() != 1) return std::nullopt;
  const char op = is_onnx_op(n, "Add")   ? '+'
                  : is_onnx_op(n, "Sub") ? '-'
                  : is_onnx_op(n, "Mul") ? '*'
                  : is_onnx_op(n, "Div") ? '/'
                                         : 0;
  if (!op) return std::nullopt;
  if (auto c = shape_keeping_scalar(g, n.inputs[1], n.inputs[0]))
    return ScalarStep{n.inputs[0], op, *c};
  // c + x and c * x commute; c - x and c / x are not affine steps of this kind.
  if (op == '+' || op == '*')
    if (auto c = shape_keeping_scalar(g, n.inputs[0], n.inputs[1]))
      return ScalarStep{n.inputs[1], op, *c};
  return std::nullopt;
}

bool near(float a, float b) {
  return std::abs(a - b) <= 1e-6f * std::max(1.0f, std::abs(b));
}

}  // namespace

Graph fold_clamped_gates(const Graph& graph) {
  Graph g = graph;
  const ValueUses uses(g);
  std::vector<char> removed(g.nodes.size(), 0);
  std::vector<Node> added;
  auto chain_link = [&](const std::string& v) -> std::optional<size_t> {
    auto r = uses.sole_reader(v);
    return r && !removed[*r] ? r : std::nullopt;
  };
  for (size_t ci = 0; ci < g.nodes.size(); ++ci) {
    const Node& clip = g.nodes[ci];
    if (removed[ci] || !is_onnx_op(clip, "Clip") || clip.opset < 11 || clip.inputs.size() != 3 ||
        clip.outputs.size() != 1)
      continue;
    const auto lo = constant_scalar(g, clip.inputs[1]), hi = constant_scalar(g, clip.inputs[2]);
    if (!lo || !hi || *lo != 0.0f || !(*hi > 0.0f) || !std::isfinite(*hi)) continue;
    // Back from the Clip through the affine steps to v; then a * v + b, composed from v up.
    std::vector<size_t> chain;
    std::string v = clip.inputs[0];
    for (;;) {
      auto p = uses.producer(v);
      if (!p || removed[*p] || uses.sole_reader(v) != (chain.empty() ? ci : chain.back())) break;
      const auto step = scalar_step(g, g.nodes[*p]);
      if (!step) break;
      chain.push_back(*p);
      v = step->x;
    }
    float a = 1, b = 0;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      const auto step = *scalar_step(g, g.nodes[*it]);
      switch (step.op) {
        case '+':
          b += step.c;
          break;
        case '-':
          b -= step.c;
          break;
        case '*':
          a *= step.c, b *= step.c;
          break;
        default:
          a /= step.c, b /= step.c;
      }
    }
    if (!std::isfinite(a) || !std::isfinite(b) || a == 0.0f) continue;
    // Forward from the Clip: scalar Mul/Div (s), then maybe v * gate and more of them (t).
    std::vector<size_t> after;
    float scale = *hi;
    std::string end = clip.outputs[0];
    auto take_scalars = [&] {
      for (auto r = chain_link(end); r; r = chain_link(end)) {
        const auto step = scalar_step(g, g.nodes[*r]);
        if (!step || step->x != end || (step->op != '*' && step->op != '/')) break;
        scale = step->op == '*' ? scale * step->c : scale / step->c;
        after.push_back(*r);
        end = g.nodes[*r].outputs[0];
      }
    };
    take_scalars();
    const std::string gate_end = end;
    const size_t gate_nodes = after.size();
    const float gate_scale = scale;  // s * hi: what multiplies the HardSigmoid
    std::optional<size_t> mul;
    if (auto r = chain_link(end); r && is_onnx_op(g.nodes[*r], "Mul") &&
                                  g.nodes[*r].inputs.size() == 2 &&
                                  (g.nodes[*r].inputs[0] == v) != (g.nodes[*r].inputs[1] == v)) {
      mul = r;
      after.push_back(*r);
      end = g.nodes[*r].outputs[0];
      take_scalars();
    }
    const float alpha = a / *hi, beta = b / *hi;
    Node gate = make_node(clip.name + "/gate", "HardSigmoid", {v}, {}, 6);
    gate.attributes["alpha"] = float_attr(alpha);
    gate.attributes["beta"] = float_attr(beta);
    if (mul && near(scale, 1.0f)) {
      if (near(alpha, 1.0f / 6.0f) && near(beta, 0.5f)) {
        added.push_back(make_node(clip.name + "/hardswish", "HardSwish", {v}, {end}, 14));
      } else {
        gate.outputs = {end + "/gate"};
        added.push_back(gate);
        added.push_back(make_node(clip.name + "/gated", "Mul", {v, end + "/gate"}, {end}, 14));
      }
    } else {
      // The gate alone, where its scale is 1 (what multiplies it stays as it is).
      if (!near(gate_scale, 1.0f)) continue;
      after.resize(gate_nodes);
      gate.outputs = {gate_end};
      added.push_back(gate);
    }
    removed[ci] = 1;
    for (size_t n : chain) removed[n] = 1;
    for (size_t n : after) removed[n] = 1;
  }
  erase_marked(g.nodes, removed);
  for (Node& n : added) g.nodes.push_back(std::move(n));
  return g;
}

}  // namespace volt
