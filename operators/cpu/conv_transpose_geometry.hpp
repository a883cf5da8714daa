// ConvTranspose's attributes resolved against its input and weight shapes (pads from pads,
// auto_pad or output_shape; output_padding), shared by the CPU and CUDA kernels.
#pragma once
#include <string>
#include <vector>

#include "runtime/graph.hpp"

namespace volt {

struct DeconvGeometry {
  int64_t n, c, m, group;  // batch, input channels, output channels, groups
  // Spatial: input sizes, kernel, strides, dilations, the pads before each axis, output sizes.
  std::vector<int64_t> in, kernel, strides, dilations, pad_begin, out;
};

class ConvTransposeAttributes {
 public:
  explicit ConvTransposeAttributes(const Node& n);
  // X is N x C x spatial, W is C x M/group x kernel; errors name the node.
  DeconvGeometry resolve(const Shape& x, const Shape& w, const Node& node) const;

 private:
  int64_t group_;
  std::vector<int64_t> kernel_shape_, strides_, dilations_, pads_, output_padding_, output_shape_;
  std::string auto_pad_;
};

}  // namespace volt
