// Axes that an op took as its `axes` attribute before some opset and as input 1 from then on
// (Squeeze and Unsqueeze from 13, ReduceSum from 13, the other Reduce ops from 18).
#pragma once
#include <vector>

#include "operators/common/shape_util.hpp"

namespace volt {

struct AxesInput {
  AxesInput(const Node& n, int input_since)
      : from_input(n.opset >= input_since), attr(n.attr_ints("axes")) {}
  // Into `axes`: the attribute, or input 1 (`value`, null while not known; `given`: whether the
  // node has the input). False while the axes are a given input not known yet.
  bool read(const Tensor* value, bool given, const Node& node, std::vector<int64_t>& axes) const {
    if (!from_input) {
      axes = attr;
      return true;
    }
    if (!given) return true;
    if (!value) return false;
    axes = to_int64_vector(*value, node, "axes");
    return true;
  }

  bool from_input;
  std::vector<int64_t> attr;
};

}  // namespace volt
