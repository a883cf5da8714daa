// The window a Slice reads, from its starts, ends, axes and steps (clamped as the spec says),
// shared by the CPU and CUDA kernels and the gradient.
#pragma once
#include <optional>
#include <vector>

#include "operators/kernel.hpp"

namespace volt {

struct SliceWindow {
  std::vector<int64_t> start, step;  // per input axis
  Shape out;
};

// A bound of a Slice with a positive step along an axis of `dim` elements: a negative one counts
// from the end, then it is clamped to [0, dim].
inline int64_t clamp_slice_bound(int64_t bound, int64_t dim) {
  if (bound < 0) bound += dim;
  return bound < 0 ? 0 : bound > dim ? dim : bound;
}

// InvalidArgument naming the node for mismatched lengths, a bad axis or a zero step.
SliceWindow slice_window(const Shape& in, const std::vector<int64_t>& starts,
                         const std::vector<int64_t>& ends, std::vector<int64_t> axes,
                         const std::vector<int64_t>& steps, const Node& node);

// An output that is one contiguous run of its input (a Slice of one image of a batch, a Gather
// of one layer of a stacked cache, a Transpose that moves axes of one element only): Slice,
// Gather and Transpose then output a view of their input, copying nothing.
struct ContiguousView {
  int64_t offset = 0;  // elements into the input
  Shape out;
};
// Whether an output of this shape, of input 0's dtype, is worth a view rather than a copy:
// not strings, and at least 1 KiB (below a few cache lines a copy costs what a view does:
// shape arithmetic).
bool worth_a_view(const InferContext& ctx, const Shape& out);
// Output 0, of shape `out`, as the view of input 0 from element `offset` on, where reading the
// input at `strides` along `shape` (the output's elements in order) is one run (is_one_run) and
// the planner places a view (InferContext::output_views_input: for a step whose shapes are
// known only at run time, only of an input that outlives the run); the caller keeps it in the
// node's state. nullopt otherwise.
std::optional<ContiguousView> view_if_one_run(InferContext& ctx, int64_t offset,
                                              std::vector<int64_t> shape,
                                              std::vector<int64_t> strides, const Shape& out);
// At run time: output 0 as the view its state describes.
void output_contiguous_view(RunContext& ctx, const ContiguousView& view);

// A Slice node's starts, ends, axes and steps: attributes before opset 10, inputs 1 to 4 after.
class SliceParameters {
 public:
  explicit SliceParameters(const Node& n);
  // At plan time: nullopt while a given index input is not known yet.
  std::optional<SliceWindow> window(const InferContext& ctx) const;
  SliceWindow window(const RunContext& ctx) const;

 private:
  // `input(i)`: {given, value (null when not known)}.
  template <class Input>
  std::optional<SliceWindow> window_of(const Shape& in, const Node& node, Input&& input) const;

  bool legacy_;
  std::vector<int64_t> starts_, ends_, axes_;
};

}  // namespace volt
