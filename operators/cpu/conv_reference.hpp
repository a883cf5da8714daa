// The direct N-d convolution loop: the oracle for oneDNN's Conv and the kernel for dtypes it
// lacks (float64, and int32 for ConvInteger and QLinearConv).
#pragma once
#include "operators/common/dispatch.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/cpu/conv_geometry.hpp"

namespace volt {

struct ConvShapes {
  int64_t n, c, m, group;
  WindowGeometry win;
  Shape out;
};

// A 2-D convolution's sizes as volt's own loops over it read them (conv_few_channels,
// conv_as_product): images, channels in and out, the planes, the window and where it starts.
struct ConvWindow2d {
  int64_t n = 0, c = 0, m = 0, h = 0, w = 0, oh = 0, ow = 0, kh = 0, kw = 0;
  int64_t stride_y = 1, stride_x = 1, dilation_y = 1, dilation_x = 1, pad_top = 0, pad_left = 0;
  ConvWindow2d() = default;
  explicit ConvWindow2d(const ConvShapes& s)  // (of two spatial axes)
      : n(s.n),
        c(s.c),
        m(s.m),
        h(s.win.in[0]),
        w(s.win.in[1]),
        oh(s.win.out[0]),
        ow(s.win.out[1]),
        kh(s.win.kernel[0]),
        kw(s.win.kernel[1]),
        stride_y(s.win.strides[0]),
        stride_x(s.win.strides[1]),
        dilation_y(s.win.dilations[0]),
        dilation_x(s.win.dilations[1]),
        pad_top(s.win.pad_begin[0]),
        pad_left(s.win.pad_begin[1]) {}
};

inline ConvShapes conv_shapes(const WindowAttributes& attrs, int64_t group, const Shape& x,
                              const Shape& w, const Node& node) {
  VOLT_CHECK(x.size() >= 3, InvalidArgument,
             node.describe() + ": input X must be N x C x spatial..., got " + shape_str(x));
  VOLT_CHECK(w.size() == x.size(), InvalidArgument,
             node.describe() + ": weights W have rank " + std::to_string(w.size()) + ", expected " +
                 std::to_string(x.size()));
  VOLT_CHECK(group >= 1, InvalidModel, node.describe() + ": group must be >= 1");
  ConvShapes s{x[0], x[1], w[0], group, {}, {}};
  VOLT_CHECK(s.c == w[1] * group, InvalidArgument,
             node.describe() + ": input has " + std::to_string(s.c) + " channels, weights " +
                 shape_str(w) + " with group " + std::to_string(group) + " expect " +
                 std::to_string(w[1] * group));
  VOLT_CHECK(s.m % group == 0, InvalidModel,
             node.describe() + ": output channels must divide by group");
  std::vector<int64_t> kernel(w.begin() + 2, w.end());
  if (!attrs.kernel_shape.empty())
    VOLT_CHECK(attrs.kernel_shape == kernel, InvalidModel,
               node.describe() + ": kernel_shape does not match the weights " + shape_str(w));
  s.win = resolve_window(attrs, std::vector<int64_t>(x.begin() + 2, x.end()), kernel, node);
  s.out = {s.n, s.m};
  s.out.insert(s.out.end(), s.win.out.begin(), s.win.out.end());
  return s;
}

// y = conv(x, w) + b, accumulated in C.
template <class T, class C = typename Compute<T>::type>
void reference_conv(const ConvShapes& s, const T* x, const T* w, const T* b, T* y) {
  const size_t r = s.win.in.size();
  const int64_t cg = s.c / s.group, mg = s.m / s.group;
  const int64_t in_sp = numel_of(s.win.in), out_sp = numel_of(s.win.out),
                k_sp = numel_of(s.win.kernel);
#pragma omp parallel for collapse(2)
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t m = 0; m < s.m; ++m) {
      const int64_t g = m / mg;
      std::vector<int64_t> o_idx(r), k_idx(r);
      for (int64_t op = 0; op < out_sp; ++op) {
        int64_t rem = op;
        for (size_t d = r; d-- > 0;) {
          o_idx[d] = rem % s.win.out[d];
          rem /= s.win.out[d];
        }
        C acc = b ? static_cast<C>(b[m]) : C(0);
        for (int64_t kp = 0; kp < k_sp; ++kp) {
          int64_t krem = kp, in_off = 0;
          bool inside = true;
          for (size_t d = r; d-- > 0;) {
            k_idx[d] = krem % s.win.kernel[d];
            krem /= s.win.kernel[d];
          }
          for (size_t d = 0; d < r && inside; ++d) {
            const int64_t i =
                o_idx[d] * s.win.strides[d] - s.win.pad_begin[d] + k_idx[d] * s.win.dilations[d];
            inside = i >= 0 && i < s.win.in[d];
            in_off = in_off * s.win.in[d] + i;
          }
          if (!inside) continue;
          for (int64_t c = 0; c < cg; ++c)
            acc += static_cast<C>(x[(n * s.c + g * cg + c) * in_sp + in_off]) *
                   static_cast<C>(w[(m * cg + c) * k_sp + kp]);
        }
        y[(n * s.m + m) * out_sp + op] = static_cast<T>(acc);
      }
    }
}

}  // namespace volt
