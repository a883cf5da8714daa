// ai.onnx.preview.training.Gradient nodes become the backward graph they stand for.
#include "runtime/passes/passes.hpp"
#include "runtime/training/autodiff.hpp"

namespace volt {

Graph expand_gradient_ops(const Graph& graph) {
  bool any = false;
  for (const Node& n : graph.nodes)
    any = any || (n.op_type == "Gradient" && n.domain == "ai.onnx.preview.training");
  if (!any) return graph;
  Graph g = graph;
  std::vector<Node> gradient_nodes;
  std::vector<Node> kept;
  for (Node& n : g.nodes)
    (n.op_type == "Gradient" && n.domain == "ai.onnx.preview.training" ? gradient_nodes : kept)
        .push_back(n);
  g.nodes = std::move(kept);
  for (const Node& n : gradient_nodes) {
    GradientRequest req;
    req.y = n.attr_string("y", "");
    req.wrt = n.attr_strings("xs");
    req.prefix = "grad/" + n.name + "/";  // several Gradient nodes: distinct backward names
    const auto grads = append_gradients(g, req, n.describe());
    for (size_t i = 0; i < grads.size() && i < n.outputs.size(); ++i) {
      Node id;
      id.name = n.name + "/out" + std::to_string(i);
      id.op_type = "Identity";
      id.opset = 13;
      id.inputs = {grads[i]};
      id.outputs = {n.outputs[i]};
      g.nodes.push_back(std::move(id));
    }
  }
  return g;
}

}  // namespace volt
