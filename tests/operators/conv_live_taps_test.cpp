// Convolutions whose taps mostly read padding run as one product per tap over the outputs where
// it reads the input (operators/cpu/conv_live_taps.cpp): DeepLab's ASPP geometry (3x3 dilated by
// 12 over 14x14), a 5x5 dilated by 4, non-square maps, stride 2, asymmetric pads, bias and ReLU,
// a batch, and a second size in one session; against the convolution written out, with X and Y
// stored channels-first and as the layout passes store them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "model_builder.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;
using testing::uniform_values;

// The convolution written out (float64), Y [N, M, OH, OW] from X [N, C, H, W] and W [M, C, k, k].
std::vector<double> convolution(const Tensor& x, const std::vector<float>& w,
                                const std::vector<float>* bias, int64_t m, int64_t k,
                                int64_t dilation, int64_t stride, const std::vector<int64_t>& pads,
                                int64_t oh, int64_t ow, bool relu) {
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), wd = x.dim(3);
  std::vector<double> y(static_cast<size_t>(n * m * oh * ow));
  for (int64_t b = 0; b < n; ++b)
    for (int64_t o = 0; o < m; ++o)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox) {
          double sum = bias ? (*bias)[o] : 0.0;
          for (int64_t i = 0; i < c; ++i)
            for (int64_t ky = 0; ky < k; ++ky)
              for (int64_t kx = 0; kx < k; ++kx) {
                const int64_t iy = oy * stride - pads[0] + ky * dilation;
                const int64_t ix = ox * stride - pads[1] + kx * dilation;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                sum += static_cast<double>(x.data<float>()[((b * c + i) * h + iy) * wd + ix]) *
                       w[((o * c + i) * k + ky) * k + kx];
              }
          y[((b * m + o) * oh + oy) * ow + ox] = relu ? std::max(sum, 0.0) : sum;
        }
  return y;
}

TEST(ConvLiveTaps, MatchTheConvolutionOverEveryTap) {
  std::mt19937 rng(17);
  struct Case {
    int64_t kernel, dilation, stride;
    std::vector<int64_t> pads;
    int64_t height, width;
  };
  const std::vector<Case> cases = {
      {3, 12, 1, {12, 12, 12, 12}, 14, 14},  // ASPP at 224 / 16
      {3, 6, 1, {6, 6, 6, 6}, 9, 11},       {5, 4, 1, {8, 8, 8, 8}, 10, 7},
      {3, 10, 2, {10, 10, 10, 10}, 15, 13}, {3, 9, 1, {9, 5, 9, 13}, 12, 16},
  };
  const int64_t c = 24, m = 40;
  for (const Case& k : cases)
    for (bool bias_and_relu : {false, true}) {
      SCOPED_TRACE(std::to_string(k.kernel) + "x" + std::to_string(k.kernel) + " dilated by " +
                   std::to_string(k.dilation) + ", stride " + std::to_string(k.stride) + " over " +
                   std::to_string(k.height) + "x" + std::to_string(k.width) +
                   (bias_and_relu ? ", bias and ReLU" : ""));
      const std::vector<float> w =
          uniform_values(rng, static_cast<size_t>(m * c * k.kernel * k.kernel), -0.5f, 0.5f);
      const std::vector<float> bias = uniform_values(rng, m, -0.5f, 0.5f);
      ModelBuilder b;
      b.input("x", 1, {-1, c, -1, -1}).output_any("y", 1);
      b.initializer("W", {m, c, k.kernel, k.kernel}, w).initializer("B", {m}, bias);
      std::vector<std::string> inputs = {"x", "W"};
      if (bias_and_relu) inputs.push_back("B");
      b.node("Conv", inputs, {bias_and_relu ? "c" : "y"}, [&](auto& n) {
        ModelBuilder::set_ints(n, "dilations", {k.dilation, k.dilation});
        ModelBuilder::set_ints(n, "strides", {k.stride, k.stride});
        ModelBuilder::set_ints(n, "pads", k.pads);
      });
      if (bias_and_relu) b.node("Relu", {"c"}, {"y"});
      const std::string bytes = b.bytes();
      // X and Y channels-first (staged through channels-last copies), and as the layout passes
      // store them (channels-last X, blocked Y on AVX2); a second size makes a second plan.
      Session plain = Session::from_bytes(bytes.data(), bytes.size(), {.optimization_level = 0});
      Session opt = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
      for (int64_t grow : {0, 3}) {
        const int64_t h = k.height + grow, wd = k.width + grow;
        Tensor x = Tensor::empty(DType::Float, {2, c, h, wd});
        const std::vector<float> v =
            uniform_values(rng, static_cast<size_t>(x.numel()), -0.5f, 0.5f);
        std::copy(v.begin(), v.end(), x.data<float>());
        const int64_t span = (k.kernel - 1) * k.dilation + 1;
        const int64_t oh = (h + k.pads[0] + k.pads[2] - span) / k.stride + 1;
        const int64_t ow = (wd + k.pads[1] + k.pads[3] - span) / k.stride + 1;
        const std::vector<double> want =
            convolution(x, w, bias_and_relu ? &bias : nullptr, m, k.kernel, k.dilation, k.stride,
                        k.pads, oh, ow, bias_and_relu);
        for (Session* s : {&plain, &opt}) {
          const Tensor got = s->run({{"x", x}})[0].tensor();
          ASSERT_EQ(got.shape(), (Shape{2, m, oh, ow}));
          // Sums of up to 24 x 25 products of values in [-0.5, 0.5], in fp32.
          for (int64_t i = 0; i < got.numel(); ++i)
            ASSERT_NEAR(got.data<float>()[i], want[i], 1e-4)
                << (s == &plain ? "unoptimized" : "optimized") << ", at " << i;
        }
      }
    }
}

}  // namespace
}  // namespace volt
