// Reverse-mode differentiation over the graph IR: from one scalar-or-tensor value back to the
// values asked for, appending backward nodes built by each op's gradient rule
// (operators/grad/). The result is an ordinary graph: planned and run like any other.
#pragma once
#include <set>
#include <string>
#include <vector>

#include "operators/grad/gradient_rule.hpp"
#include "runtime/graph.hpp"

namespace volt {

// Which values y depends on: through edges a gradient can pass (`differentiable`: inputs a
// rule declares differentiable, values If branches capture, anything an op without a rule reads)
// and through any edge at all (`reaches`, shapes and conditions included).
struct GradientReach {
  std::set<std::string> differentiable;
  std::set<std::string> reaches;
};
GradientReach gradient_reach(const Graph& graph, const std::string& y);
// Where the paths from w to y lose their gradient, for messages: "node 'f' (Floor) input 0".
std::string gradient_cuts(const Graph& graph, const std::string& y, const std::string& w);

// Appends the backward nodes to `graph`; returns the name of the gradient of each `wrt` value
// (zeros where no differentiable path leads from it to y). An op on the path from a `wrt` value
// to y that has no gradient rule is an error naming the node and op; so is a rule that leaves a
// differentiable input without its gradient.
std::vector<std::string> append_gradients(Graph& graph, const GradientRequest& request,
                                          const std::string& source);

}  // namespace volt
