// Graph passes: each is a pure function Graph -> Graph in a file of its own, run in the order
// of optimization_passes() at session creation.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "runtime/graph.hpp"

namespace volt {

struct Pass {
  std::string name;
  int min_level;  // runs when SessionOptions::optimization_level >= min_level (0: always)
  std::function<Graph(const Graph&)> apply;
};

const std::vector<Pass>& optimization_passes();
Graph run_passes(const Graph& graph, int level);

// The passes themselves.
Graph eliminate_dead_nodes(const Graph& graph);
Graph expand_gradient_ops(const Graph& graph);
Graph fuse_conv_activation(const Graph& graph);
Graph keep_sparse_weights(const Graph& graph);

// The rank of a value when the graph declares it (initializers, graph inputs, value_info); -1
// when it does not.
int declared_rank(const Graph& g, const std::string& name);

// Not in the list: run per plan for the graph inputs fed as CSR matrices. Consumers that run a
// sparse × dense kernel (MatMul input 0, Gemm input 0 without transA, B a 2-D weight) read
// them as they are; every other consumer reads a dense copy that one ai.volt Densify node per
// input makes. `spmm_ok`: the inputs whose element type the sparse kernels take.
Graph densify_sparse_inputs(const Graph& graph, const std::vector<std::string>& sparse_inputs,
                            const std::vector<std::string>& spmm_ok);

}  // namespace volt
