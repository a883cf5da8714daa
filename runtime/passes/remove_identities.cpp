// Identity nodes, and Dropout that passes X through (see passes_through), pass
// their input through: their readers read the input directly and the node goes. Exporters leave
// many (PyTorch's deduplicated weights are Identity nodes over one initializer), and they would
// hide constant weights from the fusion passes. Kept where the output is a graph output or is
// read inside a subgraph (which names it).
#include <map>

#include "runtime/passes/passes.hpp"

namespace volt {
namespace {

// Dropout passes X through when it is not in training mode (no training_mode input, or a
// constant false), or drops nothing (a constant ratio of 0, as exporters write Dropout in
// training mode: torch's Swin), and no one reads its mask.
bool passes_through(const Graph& g, const ValueUses& uses, const Node& n) {
  if (n.has_output(1) &&
      (!uses.readers(n.outputs[1]).empty() || uses.is_graph_output(n.outputs[1])))
    return false;
  if (!n.has_input(2)) return true;
  const Tensor* training = constant_value(g, n.inputs[2]);
  if (training && training->numel() == 1 && training->dtype() == DType::Bool &&
      !*training->data<bool>())
    return true;
  const std::optional<float> ratio = n.has_input(1) ? constant_scalar(g, n.inputs[1]) : 0.5f;
  return ratio && *ratio == 0.0f;
}

}  // namespace

Graph remove_identities(const Graph& graph) {
  const ValueUses uses(graph);
  std::map<std::string, std::string> alias;  // removed output -> what it passes through
  std::vector<char> removed(graph.nodes.size(), 0);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& n = graph.nodes[i];
    const bool identity = is_onnx_op(n, "Identity") && n.inputs.size() == 1;
    const bool dropout = is_onnx_op(n, "Dropout") && passes_through(graph, uses, n);
    if ((!identity && !dropout) || n.outputs.empty() || !n.has_input(0) || !n.has_output(0))
      continue;
    const std::string& out = n.outputs[0];
    if (uses.is_graph_output(out)) continue;
    bool subgraph_reader = false;
    for (const auto& r : uses.readers(out)) subgraph_reader |= r.slot == ValueUses::kSubgraph;
    if (subgraph_reader) continue;
    // Dropout's ratio (input 1) does not matter in inference; its output is x.
    std::string in = n.inputs[0];
    while (alias.count(in)) in = alias.at(in);
    alias[out] = in;
    removed[i] = 1;
  }
  if (alias.empty()) return graph;
  Graph g = graph;
  for (Node& n : g.nodes)
    for (auto& in : n.inputs) {
      auto it = alias.find(in);
      if (it != alias.end()) in = it->second;
    }
  erase_marked(g.nodes, removed);
  return g;
}

}  // namespace volt
