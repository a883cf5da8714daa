// A validated graph with dense value ids and a topological node order. Built once per session
// (and per subgraph); shape-independent. Errors here are model errors: cycles, undefined
// values, values defined twice, ops with no kernel.
#pragma once
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "operators/kernel.hpp"
#include "runtime/graph.hpp"

namespace volt {

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
  // A required input has a dimension past the first that is not a fixed number (a sentence's
  // length, an image's width): the graph will likely be fed several shapes
  // (InferContext::shapes_may_vary).
  bool input_dims_open = false;
  std::vector<int> graph_outputs;
  std::vector<int> outer_scope;  // ids of values taken from an enclosing graph
  std::vector<int> order;        // node indices, topologically sorted
  std::vector<std::vector<int>>
      node_inputs;  // per node: explicit inputs, then values its subgraphs capture (-1 = omitted)
  std::vector<std::vector<int>> node_outputs;  // per node (-1 = omitted)
  std::vector<char> is_graph_output;           // by value id
  // The value id of each initializer, in the order Graph::initializers holds them: while the map
  // holds every one (a plan may drop some; they come back for the next), the planner reads the
  // ids from here rather than hashing each name for every input shape.
  std::vector<int> initializer_ids;
  // By node index: what a node keeps across the plans of a session (NodeMemo): its kernel's
  // shape-generic state, and the planner's outputs of a node that folds from weights alone.
  std::shared_ptr<NodeMemo[]> memos;

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
