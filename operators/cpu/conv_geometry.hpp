// Convolution and pooling window geometry: kernel, strides, dilations and the resolved pads
// (auto_pad included) for N-d inputs. Shared by Conv and the pooling kernels.
#pragma once
#include <vector>

#include "operators/kernel.hpp"

namespace volt {

struct WindowGeometry {
  std::vector<int64_t> kernel, strides, dilations, pad_begin, pad_end;
  std::vector<int64_t> in, out;  // spatial sizes
};

struct WindowAttributes {
  std::vector<int64_t> kernel_shape, strides, dilations, pads;
  std::string auto_pad = "NOTSET";
  bool ceil_mode = false;
  explicit WindowAttributes(const Node& n);
};

// `kernel` is the spatial kernel size (from the attribute or the weights).
WindowGeometry resolve_window(const WindowAttributes& a, const std::vector<int64_t>& spatial_in,
                              const std::vector<int64_t>& kernel, const Node& node);

}  // namespace volt
