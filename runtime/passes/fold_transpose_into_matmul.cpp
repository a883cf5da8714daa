// Transpose -> MatMul and MatMul -> Transpose become one MatMul reading (or writing) the
// transposed operand in place: attributes volt.perm_a, volt.perm_b, volt.perm_y (the Transpose's
// perm), which the CPU MatMul turns into strided oneDNN memory descriptors. Attention as
// exporters write it (the heads split by Reshape + Transpose before Q·Kᵀ, joined by Transpose +
// Reshape after scores·V) then makes no copy of Q, K, V or the context: BERT-base has four such
// Transposes per layer, 6% of its run. Only where the Transpose's perm is explicit, the
// transposed value has no other reader, and (for Y) the MatMul has no fused bias or residual,
// whose broadcasting is along Y's own axes.
//
// ai.volt Attention (fuse_attention) takes them the same way, volt.perm_q, volt.perm_k,
// volt.perm_v and volt.perm_y: where the Transposes keep the last axis last for Q and Y, whose
// rows its product kernel reads and writes with their elements adjacent (K and V are packed
// from any strides).
#include <algorithm>

#include "operators/registry.hpp"
#include "runtime/passes/passes.hpp"

namespace volt {

Graph fold_transpose_into_matmul(const Graph& graph) {
  Graph g = graph;
  const ValueUses uses(g);
  std::vector<char> removed(g.nodes.size(), 0);
  auto sole_transpose = [&](const std::string& v) -> std::optional<size_t> {
    const auto p = uses.producer(v);
    if (!p || removed[*p] || !is_onnx_op(g.nodes[*p], "Transpose") ||
        !g.nodes[*p].has_attr("perm") || uses.is_graph_output(v))
      return std::nullopt;
    return p;
  };
  // Whether a Transpose's perm keeps the last axis last.
  auto keeps_last = [](const Node& tr) {
    const auto perm = tr.attr_ints("perm");
    return !perm.empty() && perm.back() == static_cast<int64_t>(perm.size()) - 1;
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& at = g.nodes[i];
    if (at.domain != kVoltDomain || at.op_type != "Attention" || at.outputs.size() != 1) continue;
    static const char* const kPerms[] = {"volt.perm_q", "volt.perm_k", "volt.perm_v"};
    for (size_t k = 0; k < 3 && k < at.inputs.size(); ++k) {
      const auto t = sole_transpose(at.inputs[k]);
      const auto reader = uses.sole_reader(at.inputs[k]);
      if (!t || !reader || *reader != i || (k == 0 && !keeps_last(g.nodes[*t]))) continue;
      if (std::count(at.inputs.begin(), at.inputs.end(), at.inputs[k]) > 1) continue;
      at.attributes[kPerms[k]] = g.nodes[*t].attributes.at("perm");
      at.inputs[k] = g.nodes[*t].inputs[0];
      removed[*t] = 1;
    }
    const auto r = uses.sole_reader(at.outputs[0]);
    if (!r || uses.is_graph_output(at.outputs[0])) continue;
    const Node& tr = g.nodes[*r];
    if (!is_onnx_op(tr, "Transpose") || !tr.has_attr("perm") || tr.outputs.size() != 1 ||
        !keeps_last(tr))
      continue;
    at.attributes["volt.perm_y"] = tr.attributes.at("perm");
    at.outputs[0] = tr.outputs[0];
    removed[*r] = 1;
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& mm = g.nodes[i];
    if (!is_onnx_op(mm, "MatMul") || mm.outputs.size() != 1 || mm.inputs.size() < 2) continue;
    for (size_t k = 0; k < 2; ++k) {
      const auto t = sole_transpose(mm.inputs[k]);
      const auto reader = uses.sole_reader(mm.inputs[k]);
      if (!t || !reader || *reader != i || mm.inputs[0] == mm.inputs[1]) continue;
      const Node& tr = g.nodes[*t];
      mm.attributes[k == 0 ? "volt.perm_a" : "volt.perm_b"] = tr.attributes.at("perm");
      mm.inputs[k] = tr.inputs[0];
      removed[*t] = 1;
    }
    if (mm.inputs.size() > 2) continue;  // a fused bias or residual
    const auto r = uses.sole_reader(mm.outputs[0]);
    if (!r || uses.is_graph_output(mm.outputs[0])) continue;
    const Node& tr = g.nodes[*r];
    if (!is_onnx_op(tr, "Transpose") || !tr.has_attr("perm") || tr.outputs.size() != 1) continue;
    mm.attributes["volt.perm_y"] = tr.attributes.at("perm");
    mm.outputs[0] = tr.outputs[0];
    removed[*r] = 1;
  }
  erase_marked(g.nodes, removed);
  return g;
}

}  // namespace volt
