// Scaled dot-product attention as exporters write it becomes one ai.volt Attention node:
//   MatMul(Q, Kᵀ) -> [Div(·, c) | Mul(·, c)] -> [Add(·, mask)] -> Softmax(last axis) -> MatMul(·,
//   V)
// Kᵀ is read as it is, or, when it is Transpose(K) swapping the last two axes for this product
// alone, K is read and the Transpose goes; a scalar Div or Mul on Q moves into the scale. On an
// accelerator the node is two batched products and one kernel that scales, masks and normalizes the
// scores in place: the scores make one round trip through memory instead of four. Every
// intermediate must have its one reader in the pattern.
#include <cmath>

#include "operators/registry.hpp"
#include "runtime/passes/passes.hpp"

namespace volt {
namespace {

std::optional<std::string> other_input(const Node& n, const std::string& v) {
  if (n.inputs.size() != 2) return std::nullopt;
  if (n.inputs[0] == v) return n.inputs[1];
  if (n.inputs[1] == v) return n.inputs[0];
  return std::nullopt;
}

// Whether `n` is a Transpose that swaps the last two of its (declared) axes and keeps the rest.
bool swaps_last_two_axes(const Node& n) {
  if (!is_onnx_op(n, "Transpose") || !n.has_attr("perm")) return false;
  const auto perm = n.attr_ints("perm");
  const size_t r = perm.size();
  if (r < 2) return false;
  for (size_t i = 0; i + 2 < r; ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return perm[r - 2] == static_cast<int64_t>(r - 1) && perm[r - 1] == static_cast<int64_t>(r - 2);
}

// Softmax over the last axis (opset 13's per-axis form; earlier opsets flatten from `axis`).
bool softmax_over_last_axis(const Graph& g, const Node& n) {
  if (!is_onnx_op(n, "Softmax") || n.opset < 13) return false;
  const int64_t axis = n.attr_int("axis", -1);
  return axis == -1 || (axis >= 0 && declared_rank(g, n.inputs[0]) == axis + 1);
}

}  // namespace

Graph fuse_attention(const Graph& graph) {
  PatternRewrite rw(graph);
  Graph& g = rw.graph();
  const ValueUses& uses = rw.uses();
  for (const Node& scores : g.nodes) {
    if (rw.removed(&scores) || !is_onnx_op(scores, "MatMul") || !scores.has_output(0)) continue;
    std::vector<const Node*> pattern = {&scores};
    const Node* next = rw.sole_reader(scores.outputs[0]);
    std::string value = scores.outputs[0];
    float scale = 1.0f;
    if (next && (is_onnx_op(*next, "Div") || is_onnx_op(*next, "Mul")) &&
        next->inputs.size() == 2 && next->inputs[0] == value) {
      const auto c = constant_scalar(g, next->inputs[1]);
      if (!c || *c == 0.0f) continue;
      scale = is_onnx_op(*next, "Div") ? 1.0f / *c : *c;
      pattern.push_back(next);
      value = next->outputs[0];
      next = rw.sole_reader(value);
    }
    std::string mask;
    if (next && is_onnx_op(*next, "Add")) {
      const auto m = other_input(*next, value);
      if (!m || *m == value) continue;
      mask = *m;
      pattern.push_back(next);
      value = next->outputs[0];
      next = rw.sole_reader(value);
    }
    if (!next || !softmax_over_last_axis(g, *next)) continue;
    pattern.push_back(next);
    const Node* context = rw.sole_reader(next->outputs[0], "MatMul");
    if (!context || context->inputs[0] != next->outputs[0]) continue;
    pattern.push_back(context);

    std::string k = scores.inputs[1];
    int64_t k_transposed = 1;  // input 1 is Kᵀ
    const auto producer = uses.producer(k);
    if (producer && !rw.removed(&g.nodes[*producer]) && swaps_last_two_axes(g.nodes[*producer]) &&
        rw.sole_reader(k) == &scores) {
      pattern.push_back(&g.nodes[*producer]);
      k = g.nodes[*producer].inputs[0];
      k_transposed = 0;
    }
    // A scalar Div or Mul on Q (PyTorch's attention scales Q by 1/sqrt(d) before the product)
    // moves into the scale, (Q / c) Kᵀ being (Q Kᵀ) / c: the Transpose that splits Q's heads
    // then folds into the node too, where it fed the Div (a copy and a pass over Q less).
    std::string q = scores.inputs[0];
    const auto q_producer = uses.producer(q);
    if (q_producer && !rw.removed(&g.nodes[*q_producer]) && rw.sole_reader(q) == &scores) {
      const Node& op = g.nodes[*q_producer];
      const bool div = is_onnx_op(op, "Div"), mul = is_onnx_op(op, "Mul");
      if ((div || mul) && op.inputs.size() == 2) {
        // (Div's divisor is its second input; Mul's constant either.)
        const size_t at = div || constant_scalar(g, op.inputs[1]) ? 1 : 0;
        const auto c = constant_scalar(g, op.inputs[at]);
        // (Of rank 1 at most: one of more axes would broadcast Q to a higher rank.)
        const Tensor* t = constant_value(g, op.inputs[at]);
        if (c && t && t->rank() <= 1 && *c != 0.0f && std::isfinite(*c) &&
            op.inputs[1 - at] != op.inputs[at]) {
          scale = div ? scale / *c : scale * *c;
          q = op.inputs[1 - at];
          pattern.push_back(&op);
        }
      }
    }
    Node attention = make_node(scores.name + "/attention", "Attention",
                               {q, k, context->inputs[1], mask}, {context->outputs[0]}, 1);
    attention.domain = kVoltDomain;
    attention.attributes["scale"] = float_attr(scale);
    attention.attributes["k_transposed"] = int_attr(k_transposed);
    if (mask.empty()) attention.inputs.pop_back();
    for (const Node* n : pattern) rw.remove(n);
    rw.replace(context, std::move(attention));  // Q, K, V and the mask all exist before it
  }
  return rw.finish();
}

}  // namespace volt
