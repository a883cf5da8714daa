// GELU as exporters write it with Erf, x * 0.5 * (1 + erf(x / sqrt(2))), becomes one Gelu node
// (the ONNX op of opset 20, which volt runs at any opset and the MatMul fusion can absorb):
//   Div(x, √2) | Mul(x, 1/√2) -> Erf -> Add(·, 1) -> Mul(x, ·) -> Mul(·, 0.5)
//   or with the 0.5 applied to x first: Mul(Mul(x, 0.5), Add(...)).
// Every intermediate must have its one reader in the pattern.
#include <cmath>

#include "runtime/passes/passes.hpp"

namespace volt {
namespace {

bool near(std::optional<float> v, double want) {
  return v && std::abs(*v - want) <= 1e-4 * std::abs(want);
}

// The input of `n` other than `v`, when `n` has two inputs and one of them is `v`.
std::optional<std::string> other_input(const Node& n, const std::string& v) {
  if (n.inputs.size() != 2) return std::nullopt;
  if (n.inputs[0] == v) return n.inputs[1];
  if (n.inputs[1] == v) return n.inputs[0];
  return std::nullopt;
}

}  // namespace

Graph fuse_gelu(const Graph& graph) {
  PatternRewrite rw(graph);
  Graph& g = rw.graph();
  const ValueUses& uses = rw.uses();
  auto only = [&](const std::string& v, const char* op) { return rw.sole_reader(v, op); };
  for (const Node& scale : g.nodes) {
    if (rw.removed(&scale) || scale.inputs.size() != 2 || scale.outputs.size() != 1) continue;
    const bool div =
        is_onnx_op(scale, "Div") && near(constant_scalar(g, scale.inputs[1]), std::sqrt(2.0));
    const bool mul =
        is_onnx_op(scale, "Mul") && near(constant_scalar(g, scale.inputs[1]), std::sqrt(0.5));
    if (!div && !mul) continue;
    const std::string x = scale.inputs[0];
    const Node* erf = only(scale.outputs[0], "Erf");
    const Node* add = erf ? only(erf->outputs[0], "Add") : nullptr;
    if (!add) continue;
    const auto one = other_input(*add, erf->outputs[0]);
    if (!one || !near(constant_scalar(g, *one), 1.0)) continue;
    const Node* times = only(add->outputs[0], "Mul");
    if (!times) continue;
    const auto factor = other_input(*times, add->outputs[0]);
    if (!factor) continue;
    std::vector<const Node*> pattern = {&scale, erf, add, times};
    std::string y;
    if (*factor == x) {  // Mul(x, 1 + erf) then * 0.5
      const Node* half = only(times->outputs[0], "Mul");
      const auto h = half ? other_input(*half, times->outputs[0]) : std::nullopt;
      if (!h || !near(constant_scalar(g, *h), 0.5)) continue;
      pattern.push_back(half);
      y = half->outputs[0];
    } else {  // Mul(x * 0.5, 1 + erf)
      const auto p = uses.producer(*factor);
      if (!p || rw.removed(&g.nodes[*p]) || uses.readers(*factor).size() != 1 ||
          uses.is_graph_output(*factor))
        continue;
      const Node& half = g.nodes[*p];
      const auto h = is_onnx_op(half, "Mul") ? other_input(half, x) : std::nullopt;
      if (!h || !near(constant_scalar(g, *h), 0.5)) continue;
      pattern.push_back(&half);
      y = times->outputs[0];
    }
    Node gelu = make_node(scale.name + "/gelu", "Gelu", {x}, {y}, 20);
    for (const Node* n : pattern) rw.remove(n);
    rw.replace(erf, std::move(gelu));  // x exists by then and y's readers come later
  }
  return rw.finish();
}

}  // namespace volt
