// Reverse-mode differentiation over the graph IR: from one scalar-or-tensor value back to the
// values asked for, appending backward nodes built by each op's gradient rule
// (operators/grad/). The result is an ordinary graph: planned and run like any other.
#pragma once
#include <string>
#include <vector>

#include "runtime/graph.hpp"

namespace volt {

struct GradientRequest {
  std::string y;                 // the value to differentiate
  std::string seed;              // dL/dy; "" means ones shaped like y
  std::vector<std::string> wrt;  // values to differentiate with respect to
};

// Appends the backward nodes to `graph`; returns the name of the gradient of each `wrt` value
// (zeros where y does not depend on it). An op on the path from a `wrt` value to y that has no
// gradient rule is an error naming the node and op.
std::vector<std::string> append_gradients(Graph& graph, const GradientRequest& request,
                                          const std::string& source);

}  // namespace volt
