// Where a model keeps its weights, for the trainer: initializers of the main graph, but also
// float Constant nodes (several exporters write weights so) and the initializers and Constants
// inside If branches. These become initializers of the main graph (the branches capture them),
// so that training, checkpoints and the optimizer see one kind of parameter; export writes each
// back where it came from (loaders/model_writer.cpp finds it by name).
#pragma once
#include <string>
#include <vector>

#include "runtime/graph.hpp"

namespace volt {

// Whether a float constant of this many elements is a parameter by default: scalars are
// factors of the formula (epsilons, 0.5 in GELU), not weights.
inline bool default_parameter_size(int64_t numel) {
  return numel > 1;
}

// Moves into graph.initializers every float Constant of the main graph, and every float
// initializer or Constant of an If branch (at any depth) whose name nothing else uses, when it
// has more than one element or its name starts with one of `wanted_prefixes`. Returns the names
// moved.
std::vector<std::string> lift_parameters(Graph& graph,
                                         const std::vector<std::string>& wanted_prefixes);

// A quantized graph (ConvInteger, MatMulInteger, QLinear*, QuantizeLinear, ...) cannot be
// fine-tuned: the op that names why, or nullptr.
const Node* first_quantized_node(const Graph& graph);

}  // namespace volt
