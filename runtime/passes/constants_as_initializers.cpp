// Constant nodes become initializers. Exporters write every literal as a Constant node
// (torch.onnx: the axes of each Unsqueeze, the pieces of each Reshape's target shape, the
// scalars of a LayerNorm written out): GPT-2's step has 130 of them among 473 nodes. As nodes,
// the passes' constant_value() finds them by a walk over the nodes and each plan visits them as
// nodes; as initializers they are weights like the others, looked up by name (GPT-2's passes at
// load: 71.5M -> 65.5M instructions; a plan's cost per value stayed what it was, callgrind). Kept as nodes: Constants whose output is a graph output (the
// graph's outputs are what its nodes compute) and sparse ones (sparse_value: no dense tensor).
#include "runtime/passes/passes.hpp"

namespace volt {

Graph constants_as_initializers(const Graph& graph) {
  const ValueUses uses(graph);
  std::vector<char> moved(graph.nodes.size(), 0);
  bool any = false;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& n = graph.nodes[i];
    moved[i] = is_onnx_op(n, "Constant") && n.inputs.empty() && n.outputs.size() == 1 &&
               n.has_output(0) && !uses.is_graph_output(n.outputs[0]) &&
               !n.has_attr("sparse_value") && !graph.is_initializer(n.outputs[0]);
    any = any || moved[i];
  }
  if (!any) return graph;
  Graph g = graph;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (moved[i]) g.initializers.emplace(g.nodes[i].outputs[0], constant_node_value(g.nodes[i]));
  erase_marked(g.nodes, moved);
  return g;
}

}  // namespace volt
