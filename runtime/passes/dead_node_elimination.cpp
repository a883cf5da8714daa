// Removes nodes none of whose outputs reach a graph output, and initializers nothing reads.
#include <set>

#include "runtime/compiled_graph.hpp"
#include "runtime/passes/passes.hpp"

namespace volt {

Graph eliminate_dead_nodes(const Graph& graph) {
  std::set<std::string> needed;
  for (const auto& o : graph.outputs) needed.insert(o.name);
  std::vector<char> keep(graph.nodes.size(), 0);
  // Walk backwards: a node is kept when one of its outputs is needed. Nodes are not assumed
  // to be sorted, so repeat until nothing changes.
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = graph.nodes.size(); i-- > 0;) {
      if (keep[i]) continue;
      const Node& n = graph.nodes[i];
      bool used = false;
      for (const auto& o : n.outputs) used |= !o.empty() && needed.count(o);
      if (!used) continue;
      keep[i] = 1;
      changed = true;
      for (const auto& in : n.inputs) needed.insert(in);
      for (const auto& [_, a] : n.attributes) {
        if (a.g)
          for (const auto& name : free_values(*a.g)) needed.insert(name);
        for (const auto& sg : a.graphs)
          for (const auto& name : free_values(*sg)) needed.insert(name);
      }
    }
  }
  Graph out = graph;
  out.nodes.clear();
  for (size_t i = 0; i < graph.nodes.size(); ++i)
    if (keep[i]) out.nodes.push_back(graph.nodes[i]);
  std::set<std::string> inputs;
  for (const auto& v : graph.inputs) inputs.insert(v.name);
  for (auto it = out.initializers.begin(); it != out.initializers.end();)
    it = (!needed.count(it->first) && !inputs.count(it->first)) ? out.initializers.erase(it)
                                                                : std::next(it);
  return out;
}

}  // namespace volt
