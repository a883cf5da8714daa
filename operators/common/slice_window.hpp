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

// InvalidArgument naming the node for mismatched lengths, a bad axis or a zero step.
SliceWindow slice_window(const Shape& in, const std::vector<int64_t>& starts,
                         const std::vector<int64_t>& ends, std::vector<int64_t> axes,
                         const std::vector<int64_t>& steps, const Node& node);

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
