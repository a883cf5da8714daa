// GELU as exporters write it with Erf, x * 0.5 * (1 + erf(x / sqrt(2))), becomes one Gelu node
// (the ONNX op of opset 20, which volt runs at any opset and the MatMul fusion can absorb):
//   Div(x, √2) | Mul(x, 1/√2) -> Erf -> Add(·, 1) -> Mul(x, ·) -> Mul(·, 0.5)
//   or with the 0.5 applied to x first: Mul(Mul(x, 0.5), Add(...)).
// And GELU's tanh approximation as GPT-2's exports write it,
// 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), with x^3 as Pow(x, 3) or x * x * x
// and the 0.5 on the product, on x or on the sum: one Gelu with approximate = "tanh" (nine nodes
// a layer, each a pass over the MLP's widest activation, and a node for each new input shape's
// plan).
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

// x^3 where `cube` is written as Pow(x, 3), Mul(x, Mul(x, x)) or Mul(Mul(x, x), x): x, and the
// nodes besides the Pow or outer Mul.
struct Cube {
  std::string x;
  std::vector<const Node*> inner;
};
std::optional<Cube> cube_of(const Graph& g, const ValueUses& uses, const Node& cube) {
  if (is_onnx_op(cube, "Pow") && cube.inputs.size() == 2 &&
      near(constant_scalar(g, cube.inputs[1]), 3.0))
    return Cube{cube.inputs[0], {}};
  if (!is_onnx_op(cube, "Mul") || cube.inputs.size() != 2) return std::nullopt;
  for (int square_at : {0, 1}) {
    const std::string& x = cube.inputs[static_cast<size_t>(1 - square_at)];
    const auto p = uses.producer(cube.inputs[static_cast<size_t>(square_at)]);
    if (!p) continue;
    const Node& square = g.nodes[*p];
    if (is_onnx_op(square, "Mul") && square.inputs.size() == 2 && square.inputs[0] == x &&
        square.inputs[1] == x &&
        uses.sole_reader(square.outputs[0]) == static_cast<size_t>(&cube - g.nodes.data()))
      return Cube{x, {&square}};
  }
  return std::nullopt;
}

// The tanh form, matched from its Tanh node; `rw` loses the pattern and gains the Gelu.
void fuse_gelu_tanh(PatternRewrite& rw, const Node& tanh) {
  Graph& g = rw.graph();
  const ValueUses& uses = rw.uses();
  auto producer = [&](const std::string& v, const char* op) -> const Node* {
    const auto p = uses.producer(v);
    const Node* n = p ? &g.nodes[*p] : nullptr;
    return n && !rw.removed(n) && is_onnx_op(*n, op) && n->inputs.size() == 2 &&
                   uses.sole_reader(v) && !uses.is_graph_output(v)
               ? n
               : nullptr;
  };
  // tanh(k * (x + c * x^3))
  const Node* scaled = producer(tanh.inputs[0], "Mul");
  if (!scaled) return;
  std::string sum;
  for (int at : {0, 1})
    if (near(constant_scalar(g, scaled->inputs[static_cast<size_t>(at)]),
             0.7978845608028654 /* sqrt(2 / pi) */))
      sum = scaled->inputs[static_cast<size_t>(1 - at)];
  const Node* add = sum.empty() ? nullptr : producer(sum, "Add");
  if (!add) return;
  std::vector<const Node*> pattern = {scaled, add, &tanh};
  std::string x;
  for (int at : {0, 1}) {
    const Node* term = producer(add->inputs[static_cast<size_t>(at)], "Mul");
    if (!term || !x.empty()) continue;
    for (int c : {0, 1}) {
      if (!near(constant_scalar(g, term->inputs[static_cast<size_t>(c)]), 0.044715)) continue;
      const auto p = uses.producer(term->inputs[static_cast<size_t>(1 - c)]);
      const Node* cube = p ? &g.nodes[*p] : nullptr;
      if (!cube || rw.removed(cube) || !uses.sole_reader(cube->outputs[0])) continue;
      const auto k = cube_of(g, uses, *cube);
      if (!k || k->x != add->inputs[static_cast<size_t>(1 - at)]) continue;
      x = k->x;
      pattern.insert(pattern.end(), {term, cube});
      pattern.insert(pattern.end(), k->inner.begin(), k->inner.end());
    }
  }
  if (x.empty()) return;
  // 1 + tanh(...)
  const Node* one_plus = rw.sole_reader(tanh.outputs[0], "Add");
  const auto one = one_plus ? other_input(*one_plus, tanh.outputs[0]) : std::nullopt;
  if (!one || !near(constant_scalar(g, *one), 1.0)) return;
  pattern.push_back(one_plus);
  // 0.5 * x * (1 + tanh): the 0.5 on the product, on x, or on the sum.
  auto half = [&](const Node& n, const std::string& v) {
    const auto h = is_onnx_op(n, "Mul") ? other_input(n, v) : std::nullopt;
    return h && near(constant_scalar(g, *h), 0.5);
  };
  const std::string& a = one_plus->outputs[0];
  std::string y;
  if (const Node* times = rw.sole_reader(a, "Mul")) {
    const auto other = other_input(*times, a);
    if (other && *other == x) {  // (x * a) * 0.5
      const Node* last = rw.sole_reader(times->outputs[0], "Mul");
      if (last && half(*last, times->outputs[0])) {
        pattern.insert(pattern.end(), {times, last});
        y = last->outputs[0];
      }
    } else if (const Node* h = other ? producer(*other, "Mul") : nullptr;
               h && half(*h, x)) {  // (x * 0.5) * a
      pattern.insert(pattern.end(), {h, times});
      y = times->outputs[0];
    } else if (half(*times, a)) {  // x * (a * 0.5)
      const Node* last = rw.sole_reader(times->outputs[0], "Mul");
      const auto o = last ? other_input(*last, times->outputs[0]) : std::nullopt;
      if (o && *o == x) {
        pattern.insert(pattern.end(), {times, last});
        y = last->outputs[0];
      }
    }
  }
  if (y.empty()) return;
  Node gelu = make_node(tanh.name + "/gelu", "Gelu", {x}, {y}, 20);
  gelu.attributes["approximate"] = string_attr("tanh");
  for (const Node* n : pattern) rw.remove(n);
  rw.replace(&tanh, std::move(gelu));  // x exists by then and y's readers come later
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
  for (const Node& tanh : g.nodes)
    if (!rw.removed(&tanh) && is_onnx_op(tanh, "Tanh") && tanh.inputs.size() == 1 &&
        tanh.outputs.size() == 1)
      fuse_gelu_tanh(rw, tanh);
  return rw.finish();
}

}  // namespace volt
