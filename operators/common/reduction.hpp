// What the Reduce* ops share across devices: which reduction, which axes (an attribute before
// the opset where they became input 1), and the output shape.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "operators/common/axes_input.hpp"
#include "operators/kernel.hpp"

namespace volt {

enum class Reduction { Sum, Mean, Max, Min, Prod, SumSquare, L1, L2, LogSum, LogSumExp };

// The Reduce ops, each with the opset from which its axes are input 1 rather than an attribute.
struct ReduceOpInfo {
  const char* op;
  Reduction reduction;
  int axes_input_since;
};
inline constexpr ReduceOpInfo kReduceOps[] = {
    {"ReduceSum", Reduction::Sum, 13},       {"ReduceMean", Reduction::Mean, 18},
    {"ReduceMax", Reduction::Max, 18},       {"ReduceMin", Reduction::Min, 18},
    {"ReduceProd", Reduction::Prod, 18},     {"ReduceSumSquare", Reduction::SumSquare, 18},
    {"ReduceL1", Reduction::L1, 18},         {"ReduceL2", Reduction::L2, 18},
    {"ReduceLogSum", Reduction::LogSum, 18}, {"ReduceLogSumExp", Reduction::LogSumExp, 18}};

// Which axes are reduced, and the shapes either side.
struct ReducePlan {
  std::vector<char> reduced;  // per input axis
  Shape out;                  // with or without kept dims
  bool identity = false;      // noop_with_empty_axes and no axes
};

ReducePlan plan_reduce(const Shape& in, std::vector<int64_t> axes, bool keepdims, bool noop_empty,
                       const Node& node);

// A Reduce node's attributes; axes from the attribute before `axes_input_since` (13 for
// ReduceSum, 18 for the others), from input 1 after.
struct ReduceAttributes {
  ReduceAttributes(const Node& n, int axes_input_since)
      : keepdims(n.attr_int("keepdims", 1) != 0),
        noop_with_empty_axes(n.attr_int("noop_with_empty_axes", 0) != 0),
        axes(n, axes_input_since) {}

  bool keepdims, noop_with_empty_axes;
  AxesInput axes;
};

// The maximum or minimum (`pick`) of run[0, count) from `start`, in eight independent lanes;
// `pick(v, m)` keeps m for a NaN v, so NaNs are skipped (ReduceMax/Min, LogSumExp, Hardmax).
template <class Pick>
float extreme_of_run(const float* run, int64_t count, float start, Pick pick) {
  float part[8];
  std::fill(part, part + 8, start);
  int64_t i = 0;
  for (; i + 8 <= count; i += 8)
    for (int k = 0; k < 8; ++k) part[k] = pick(run[i + k], part[k]);
  for (int k = 0; i < count; ++i, ++k) part[k] = pick(run[i], part[k]);
  float m = start;
  for (float v : part) m = pick(v, m);
  return m;
}

}  // namespace volt
