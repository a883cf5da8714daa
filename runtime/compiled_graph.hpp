// A validated graph with dense value ids and a topological node order. Built once per session
// (and per subgraph); shape-independent. Errors here are model errors: cycles, undefined
// values, values defined twice, ops with no kernel.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "operators/kernel.hpp"
#include "runtime/graph.hpp"

namespace volt {

// The outputs of nodes that fold to constants whatever the caller feeds (Constant nodes, and
// what computes from initializers alone): computed by the first plan, taken as they are by every
// later one, so that a new input shape does not rebuild them.
class FoldedConstants {
 public:
  // The outputs of node `node`, or null when they were not stored.
  const std::vector<Value>* find(int node) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = outputs_.find(node);
    return it == outputs_.end() ? nullptr : &it->second;
  }
  void store(int node, std::vector<Value> outputs) {
    std::lock_guard<std::mutex> lock(mutex_);
    outputs_.emplace(node, std::move(outputs));
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<int, std::vector<Value>> outputs_;  // (entries are never erased)
};

struct CompiledGraph {
  std::shared_ptr<const Graph> graph;
  std::string source;  // the model file, for messages
  std::string device;  // of the host's kernels: "cpu"
  // The session's accelerator (cpu when it has none): where nodes placed on a device run.
  Device accelerator;

  std::vector<std::string> names;            // value id -> name
  std::unordered_map<std::string, int> ids;  // name -> value id
  std::vector<int> graph_inputs;             // ids, in graph order (initializer-backed too)
  std::vector<int> required_inputs;          // the graph inputs without an initializer
  std::vector<int> graph_outputs;
  std::vector<int> outer_scope;  // ids of values taken from an enclosing graph
  std::vector<int> order;        // node indices, topologically sorted
  std::vector<std::vector<int>>
      node_inputs;  // per node: explicit inputs, then values its subgraphs capture (-1 = omitted)
  std::vector<std::vector<int>> node_outputs;  // per node (-1 = omitted)
  std::vector<char> is_graph_output;           // by value id
  std::shared_ptr<FoldedConstants> folded = std::make_shared<FoldedConstants>();
  std::shared_ptr<NodeMemo[]> memos;  // by node index

  int id(const std::string& name) const;
  // The registry device of a node's kernels.
  const std::string& kernel_device(const Node& n) const {
    return n.device.empty() ? device : n.device;
  }
  bool on_accelerator(const Node& n) const { return !n.device.empty(); }
};

// `device`: the session's ("cpu", "cuda:0"); host nodes use cpu kernels. `outer_scope`: names
// visible from enclosing graphs (empty for the main graph).
CompiledGraph compile_graph(std::shared_ptr<const Graph> graph, const std::string& source,
                            const std::string& device,
                            const std::vector<std::string>& outer_scope = {});

// Names a graph reads without defining them (including through nested subgraphs).
std::vector<std::string> free_values(const Graph& graph);

}  // namespace volt
