#include "runtime/compiled_graph.hpp"

#include <queue>
#include <set>

#include "operators/registry.hpp"
#include "runtime/error.hpp"

namespace volt {

int CompiledGraph::id(const std::string& name) const {
  auto it = ids.find(name);
  return it == ids.end() ? -1 : it->second;
}

namespace {
void collect_free(const Graph& g, std::set<std::string>& out) {
  std::set<std::string> defined;
  for (const auto& v : g.inputs) defined.insert(v.name);
  for (const auto& [name, _] : g.initializers) defined.insert(name);
  for (const auto& n : g.nodes)
    for (const auto& o : n.outputs) defined.insert(o);
  auto use = [&](const std::string& name) {
    if (!name.empty() && !defined.count(name)) out.insert(name);
  };
  for (const auto& n : g.nodes) {
    for (const auto& i : n.inputs) use(i);
    for (const auto& [_, a] : n.attributes) {
      std::set<std::string> inner;
      if (a.g) collect_free(*a.g, inner);
      for (const auto& sg : a.graphs) collect_free(*sg, inner);
      for (const auto& name : inner) use(name);
    }
  }
  for (const auto& o : g.outputs) use(o.name);
}
}  // namespace

std::vector<std::string> free_values(const Graph& graph) {
  std::set<std::string> out;
  collect_free(graph, out);
  return {out.begin(), out.end()};
}

CompiledGraph compile_graph(std::shared_ptr<const Graph> graph, const std::string& source,
                            const std::string& device,
                            const std::vector<std::string>& outer_scope) {
  CompiledGraph cg;
  cg.graph = graph;
  cg.memos = std::shared_ptr<NodeMemo[]>(new NodeMemo[graph->nodes.size()]);
  cg.source = source;
  cg.accelerator = Device::parse(device);
  cg.device = "cpu";
  const Graph& g = *graph;
  const std::string where = source + ": ";

  auto intern = [&](const std::string& name) {
    auto [it, inserted] = cg.ids.emplace(name, static_cast<int>(cg.names.size()));
    if (inserted) cg.names.push_back(name);
    return it->second;
  };
  // producer: -2 graph input, -3 initializer, -4 outer scope, >=0 node index
  std::unordered_map<int, int> producer;
  for (const auto& v : g.inputs) {
    VOLT_CHECK(!v.name.empty(), InvalidModel, where + "a graph input has no name");
    const int id = intern(v.name);
    VOLT_CHECK(!producer.count(id), InvalidModel,
               where + "graph input '" + v.name + "' is declared twice");
    producer[id] = -2;
    cg.graph_inputs.push_back(id);
    if (!g.is_initializer(v.name)) {
      cg.required_inputs.push_back(id);
      if (v.kind == ValueInfo::Kind::Tensor && v.has_shape)
        for (size_t d = 1; d < v.shape.size(); ++d)
          cg.input_dims_open = cg.input_dims_open || !v.shape[d].is_fixed();
    }
  }
  for (const auto& [name, _] : g.initializers) {
    const int id = intern(name);
    if (!producer.count(id)) producer[id] = -3;
  }
  for (const auto& [name, _] : g.sparse_initializers) {
    const int id = intern(name);
    if (!producer.count(id)) producer[id] = -3;
  }
  for (const auto& name : outer_scope) {
    const int id = intern(name);
    if (!producer.count(id)) {
      producer[id] = -4;
      cg.outer_scope.push_back(id);
    }
  }
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    std::vector<int> outs;
    for (const auto& o : node.outputs) {
      if (o.empty()) {
        outs.push_back(-1);
        continue;
      }
      const int id = intern(o);
      auto it = producer.find(id);
      if (it != producer.end()) {
        const std::string other = it->second == -2   ? "a graph input"
                                  : it->second == -3 ? "an initializer"
                                  : it->second == -4 ? "a value of the enclosing graph"
                                                     : g.nodes[it->second].describe();
        // Subgraphs may shadow outer names; everything else is a duplicate definition.
        VOLT_CHECK(it->second == -4, InvalidModel,
                   where + node.describe() + ": output '" + o + "' is already defined by " + other);
      }
      producer[id] = static_cast<int>(n);
      outs.push_back(id);
    }
    cg.node_outputs.push_back(std::move(outs));
  }
  // Inputs, explicit and captured by subgraphs; every one must be defined somewhere.
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    std::vector<int> ins;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (node.inputs[i].empty()) {
        ins.push_back(-1);
        continue;
      }
      const int id = cg.id(node.inputs[i]);
      VOLT_CHECK(id >= 0 && producer.count(id), InvalidModel,
                 where + node.describe() + ": input " + std::to_string(i) + " '" + node.inputs[i] +
                     "' is not a graph input, an initializer or the output of any node");
      ins.push_back(id);
    }
    for (const auto& [_, a] : node.attributes) {
      std::vector<std::shared_ptr<Graph>> subs = a.graphs;
      if (a.g) subs.push_back(a.g);
      for (const auto& sg : subs)
        for (const auto& name : free_values(*sg)) {
          const int id = cg.id(name);
          VOLT_CHECK(
              id >= 0 && producer.count(id), InvalidModel,
              where + node.describe() + ": its subgraph uses '" + name + "', which is not defined");
          ins.push_back(id);
        }
    }
    cg.node_inputs.push_back(std::move(ins));
  }
  for (const auto& v : g.outputs) {
    const int id = cg.id(v.name);
    VOLT_CHECK(id >= 0 && producer.count(id), InvalidModel,
               where + "graph output '" + v.name + "' is not produced by any node or input");
    cg.graph_outputs.push_back(id);
  }
  cg.is_graph_output.assign(cg.names.size(), 0);
  for (int id : cg.graph_outputs) cg.is_graph_output[id] = 1;
  for (const auto& [name, tensor] : g.initializers) cg.initializer_ids.push_back(cg.id(name));

  // Kahn's algorithm; what is left over sits on a cycle.
  std::vector<int> pending(g.nodes.size(), 0);
  std::vector<std::vector<int>> consumers(g.nodes.size());
  for (size_t n = 0; n < g.nodes.size(); ++n)
    for (int id : cg.node_inputs[n]) {
      if (id < 0) continue;
      const int p = producer.at(id);
      if (p >= 0) {
        ++pending[n];
        consumers[p].push_back(static_cast<int>(n));
      }
    }
  std::queue<int> ready;
  for (size_t n = 0; n < g.nodes.size(); ++n)
    if (pending[n] == 0) ready.push(static_cast<int>(n));
  while (!ready.empty()) {
    const int n = ready.front();
    ready.pop();
    cg.order.push_back(n);
    for (int c : consumers[n])
      if (--pending[c] == 0) ready.push(c);
  }
  if (cg.order.size() != g.nodes.size()) {
    for (size_t n = 0; n < g.nodes.size(); ++n)
      if (pending[n] > 0)
        fail(ErrorCode::InvalidModel,
             where + "the graph has a cycle through " + g.nodes[n].describe());
  }

  // Every op must have a kernel on this device (dtype is checked when a plan is built).
  for (const Node& node : g.nodes)
    VOLT_CHECK(KernelRegistry::instance().has_op(node.domain, node.op_type, node.opset,
                                                 cg.kernel_device(node)),
               NotImplemented,
               where + node.describe() + ": op '" + node.op_type + "' (domain " + node.domain +
                   ", opset " + std::to_string(node.opset) + ") is not supported on " +
                   cg.kernel_device(node));
  return cg;
}

}  // namespace volt
