#include "operators/cpu/conv_transpose_geometry.hpp"

#include "operators/common/shape_util.hpp"
#include "runtime/error.hpp"

namespace volt {

ConvTransposeAttributes::ConvTransposeAttributes(const Node& n)
    : group_(n.attr_int("group", 1)),
      kernel_shape_(n.attr_ints("kernel_shape")),
      strides_(n.attr_ints("strides")),
      dilations_(n.attr_ints("dilations")),
      pads_(n.attr_ints("pads")),
      output_padding_(n.attr_ints("output_padding")),
      output_shape_(n.attr_ints("output_shape")),
      auto_pad_(n.attr_string("auto_pad", "NOTSET")) {}

DeconvGeometry ConvTransposeAttributes::resolve(const Shape& x, const Shape& w,
                                                const Node& node) const {
  VOLT_CHECK(x.size() >= 3 && w.size() == x.size(), InvalidArgument,
             node.describe() + ": X " + shape_str(x) + " and W " + shape_str(w) +
                 " must be N x C x spatial and C x M/group x kernel");
  VOLT_CHECK(w[0] == x[1], InvalidArgument,
             node.describe() + ": W has " + std::to_string(w[0]) + " input channels, X has " +
                 std::to_string(x[1]));
  const size_t r = x.size() - 2;
  DeconvGeometry g{
      x[0], x[1], w[1] * group_, group_, {x.begin() + 2, x.end()}, {w.begin() + 2, w.end()}, {}, {},
      {},   {}};
  // kernel_shape, where given, must be the weights' own spatial shape (found by fuzzing: a
  // larger one read past W).
  VOLT_CHECK(kernel_shape_.empty() || kernel_shape_ == g.kernel, InvalidArgument,
             node.describe() + ": kernel_shape " + shape_str(kernel_shape_) +
                 " differs from the weights' " + shape_str(g.kernel));
  auto list = [&](const std::vector<int64_t>& v, int64_t fallback) {
    return v.empty() ? std::vector<int64_t>(r, fallback) : v;
  };
  g.strides = list(strides_, 1);
  g.dilations = list(dilations_, 1);
  const auto out_pad = list(output_padding_, 0);
  VOLT_CHECK(
      g.strides.size() == r && g.dilations.size() == r && out_pad.size() == r, InvalidModel,
      node.describe() + ": strides, dilations and output_padding need one value per spatial axis");
  // output_shape names the spatial sizes (or the whole shape: its last r values are read).
  VOLT_CHECK(output_shape_.empty() || output_shape_.size() >= r, InvalidModel,
             node.describe() + ": output_shape " + shape_str(output_shape_) + " has fewer than " +
                 std::to_string(r) + " spatial sizes");
  g.pad_begin.assign(r, 0);
  g.out.resize(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t full =
        g.strides[i] * (g.in[i] - 1) + out_pad[i] + (g.kernel[i] - 1) * g.dilations[i] + 1;
    int64_t target = -1;
    if (!output_shape_.empty())
      target = output_shape_[output_shape_.size() - r + i];
    else if (auto_pad_ == "SAME_UPPER" || auto_pad_ == "SAME_LOWER")
      target = g.in[i] * g.strides[i];
    if (target >= 0) {
      // A negative total pads the end (output_shape larger than the natural size); halves
      // round toward minus infinity as in the spec's reference.
      const int64_t total = full - target;
      VOLT_CHECK(target <= 4 * full + 1024, InvalidArgument,
                 node.describe() +
                     ": output_shape is far larger than the transposed convolution produces");
      const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
      g.pad_begin[i] = auto_pad_ == "SAME_UPPER" ? half : total - half;
      g.out[i] = target;
    } else {
      int64_t pb = 0, pe = 0;
      if (!pads_.empty() && auto_pad_ != "VALID") {
        VOLT_CHECK(pads_.size() == 2 * r, InvalidModel,
                   node.describe() + ": pads needs two values per spatial axis");
        pb = pads_[i];
        pe = pads_[i + r];
      }
      g.pad_begin[i] = pb;
      g.out[i] = full - pb - pe;
      VOLT_CHECK(g.out[i] >= 0, InvalidArgument,
                 node.describe() + ": pads remove more than the output has");
    }
  }
  return g;
}

}  // namespace volt
