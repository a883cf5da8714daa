// Convolution and pooling window geometry: kernel, strides, dilations and the resolved pads
// (auto_pad included) for N-d inputs. Shared by Conv and the pooling kernels.
#pragma once
#include <optional>
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

// The window without the taps that read padding only, for every output position (a 3x3 dilated
// by 36 over a 14x14 map, as DeepLab's ASPP has it, reads the map with its centre tap alone):
// per axis, the first live tap, and the window over the live taps with its pads moved in so that
// every output reads the same input. Empty when every tap is live, or when moving the pads in
// would leave one negative.
struct LiveWindow {
  std::vector<int64_t> first_tap;
  WindowGeometry window;
};
std::optional<LiveWindow> live_window(const WindowGeometry& w);

// `kernel` is the spatial kernel size (from the attribute or the weights).
WindowGeometry resolve_window(const WindowAttributes& a, const std::vector<int64_t>& spatial_in,
                              const std::vector<int64_t>& kernel, const Node& node);

}  // namespace volt
