// Conv -> Relu, Conv -> Add -> Relu and Conv -> Add become one Conv with oneDNN post-ops
// (attribute volt.activation, residual as input 3). Only where the intermediate values have no
// other reader and are not graph outputs.
#include <map>

#include "runtime/compiled_graph.hpp"
#include "runtime/passes/passes.hpp"

namespace volt {

namespace {

struct Uses {
  std::map<std::string, int> readers;
  std::map<std::string, size_t> producer;
  std::map<std::string, bool> is_output;
  explicit Uses(const Graph& g) {
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      for (const auto& in : g.nodes[i].inputs)
        if (!in.empty()) ++readers[in];
      for (const auto& [_, a] : g.nodes[i].attributes) {
        // Values read inside subgraphs count as readers too.
        std::vector<std::shared_ptr<Graph>> subs = a.graphs;
        if (a.g) subs.push_back(a.g);
        for (const auto& sg : subs)
          for (const auto& name : free_values(*sg)) ++readers[name];
      }
      for (const auto& o : g.nodes[i].outputs) producer[o] = i;
    }
    for (const auto& o : g.outputs) is_output[o.name] = true;
  }
  // The one node that reads `v`, if exactly one does and `v` is not a graph output.
  const Node* sole_reader(const Graph& g, const std::string& v) const {
    auto r = readers.find(v);
    if (r == readers.end() || r->second != 1 || is_output.count(v)) return nullptr;
    for (const Node& n : g.nodes)
      for (const auto& in : n.inputs)
        if (in == v) return &n;
    return nullptr;
  }
};

bool is_op(const Node* n, const char* op) {
  return n && n->op_type == op && n->domain == kOnnxDomain;
}

}  // namespace

Graph fuse_conv_activation(const Graph& graph) {
  Graph g = graph;
  std::map<const Node*, bool> removed;
  const Uses uses(g);
  for (Node& conv : g.nodes) {
    if (!is_op(&conv, "Conv") || conv.outputs.size() != 1 || conv.has_attr("volt.activation") ||
        conv.inputs.size() > 3)
      continue;
    std::string out = conv.outputs[0];
    const Node* next = uses.sole_reader(g, out);
    if (is_op(next, "Add") && next->inputs.size() == 2 && next->inputs[0] != next->inputs[1]) {
      const std::string residual = next->inputs[0] == out ? next->inputs[1] : next->inputs[0];
      // The residual must exist before the Conv runs; the planner's order guarantees it as an
      // input.
      conv.inputs.resize(3);
      conv.inputs.push_back(residual);
      removed[next] = true;
      out = next->outputs[0];
      next = uses.sole_reader(g, out);
    }
    if (is_op(next, "Relu")) {
      Attribute a;
      a.type = Attribute::Type::String;
      a.s = "Relu";
      conv.attributes["volt.activation"] = a;
      removed[next] = true;
      out = next->outputs[0];
    }
    conv.outputs[0] = out;
  }
  std::vector<Node> kept;
  for (const Node& n : g.nodes)
    if (!removed.count(&n)) kept.push_back(n);
  g.nodes = std::move(kept);
  return g;
}

}  // namespace volt
