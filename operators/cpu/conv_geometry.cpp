#include "operators/cpu/conv_geometry.hpp"

namespace volt {

WindowAttributes::WindowAttributes(const Node& n)
    : kernel_shape(n.attr_ints("kernel_shape")),
      strides(n.attr_ints("strides")),
      dilations(n.attr_ints("dilations")),
      pads(n.attr_ints("pads")),
      auto_pad(n.attr_string("auto_pad", "NOTSET")),
      ceil_mode(n.attr_int("ceil_mode", 0) != 0) {
  VOLT_CHECK(auto_pad == "NOTSET" || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER" ||
                 auto_pad == "VALID",
             InvalidModel,
             n.describe() + ": auto_pad '" + auto_pad +
                 "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
}

WindowGeometry resolve_window(const WindowAttributes& a, const std::vector<int64_t>& in,
                              const std::vector<int64_t>& kernel, const Node& node) {
  const size_t r = in.size();
  WindowGeometry g;
  g.in = in;
  g.kernel = kernel;
  auto list = [&](const std::vector<int64_t>& v, int64_t fallback, const char* name) {
    if (v.empty()) return std::vector<int64_t>(r, fallback);
    VOLT_CHECK(v.size() == r, InvalidModel,
               node.describe() + ": " + name + " has " + std::to_string(v.size()) + " values for " +
                   std::to_string(r) + " spatial axes");
    for (int64_t x : v)
      VOLT_CHECK(x >= 1, InvalidModel, node.describe() + ": " + name + " must be >= 1");
    return v;
  };
  VOLT_CHECK(kernel.size() == r, InvalidArgument,
             node.describe() + ": kernel has " + std::to_string(kernel.size()) +
                 " spatial axes, input has " + std::to_string(r));
  for (int64_t k : kernel)
    VOLT_CHECK(k >= 1, InvalidModel, node.describe() + ": kernel sizes must be >= 1");
  g.strides = list(a.strides, 1, "strides");
  g.dilations = list(a.dilations, 1, "dilations");
  g.pad_begin.assign(r, 0);
  g.pad_end.assign(r, 0);
  g.out.resize(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t eff = (kernel[i] - 1) * g.dilations[i] + 1;
    if (a.auto_pad == "SAME_UPPER" || a.auto_pad == "SAME_LOWER") {
      g.out[i] = (in[i] + g.strides[i] - 1) / g.strides[i];
      const int64_t total = std::max<int64_t>(0, (g.out[i] - 1) * g.strides[i] + eff - in[i]);
      g.pad_begin[i] = a.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      g.pad_end[i] = total - g.pad_begin[i];
      continue;
    }
    if (a.auto_pad == "NOTSET" && !a.pads.empty()) {
      VOLT_CHECK(a.pads.size() == 2 * r, InvalidModel,
                 node.describe() + ": pads has " + std::to_string(a.pads.size()) +
                     " values, expected " + std::to_string(2 * r));
      g.pad_begin[i] = a.pads[i];
      g.pad_end[i] = a.pads[i + r];
      VOLT_CHECK(g.pad_begin[i] >= 0 && g.pad_end[i] >= 0, InvalidModel,
                 node.describe() + ": pads must be >= 0");
    }
    const int64_t span = in[i] + g.pad_begin[i] + g.pad_end[i] - eff;
    VOLT_CHECK(span >= 0, InvalidArgument,
               node.describe() + ": the window (" + std::to_string(eff) +
                   ") is larger than the padded input (" +
                   std::to_string(in[i] + g.pad_begin[i] + g.pad_end[i]) + ") on spatial axis " +
                   std::to_string(i));
    g.out[i] = (a.ceil_mode ? (span + g.strides[i] - 1) / g.strides[i] : span / g.strides[i]) + 1;
    // With ceil_mode, a last window that would start in the end padding is dropped.
    if (a.ceil_mode && (g.out[i] - 1) * g.strides[i] >= in[i] + g.pad_begin[i]) --g.out[i];
  }
  return g;
}

std::optional<LiveWindow> live_window(const WindowGeometry& w) {
  LiveWindow live{std::vector<int64_t>(w.kernel.size(), 0), w};
  bool trimmed = false;
  for (size_t d = 0; d < w.kernel.size(); ++d) {
    const int64_t k = w.kernel[d], s = w.strides[d], dil = w.dilations[d];
    const int64_t pb = w.pad_begin[d], last_out = w.out[d] - 1;
    if (w.out[d] <= 0 || w.in[d] <= 0) return std::nullopt;
    // Tap t reads positions o*s - pb + t*dil, o in [0, last_out]: it is live when the last one
    // is >= 0 and the first <= in - 1.
    const int64_t need = pb - last_out * s;  // t*dil >= need
    const int64_t first = std::max<int64_t>(0, need <= 0 ? 0 : (need + dil - 1) / dil);
    const int64_t last = std::min<int64_t>(k - 1, (w.in[d] - 1 + pb) / dil);
    if (first > last) return std::nullopt;  // (no live tap: the output is the bias alone)
    if (first == 0 && last == k - 1) continue;
    live.first_tap[d] = first;
    live.window.kernel[d] = last - first + 1;
    live.window.pad_begin[d] = pb - first * dil;
    live.window.pad_end[d] = w.pad_end[d] - (k - 1 - last) * dil;
    if (live.window.pad_begin[d] < 0 || live.window.pad_end[d] < 0) return std::nullopt;
    trimmed = true;
  }
  if (!trimmed) return std::nullopt;
  return live;
}

}  // namespace volt
