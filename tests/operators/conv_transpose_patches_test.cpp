// ConvTranspose whose kernel equals its strides (no pads, dilations or groups: a U-Net's 2x2
// stride-2 upsampling) runs as a 1x1 convolution to M x kh x kw channels whose output is
// scattered into each input pixel's patch of Y (operators/cpu/conv_transpose.cpp). Checked
// against the sum written out here: a lone node (X channels-first: oneDNN's deconvolution), Y
// channels-last (after a depthwise convolution and a square, which keep the region
// channels-last) and in blocks (after a 1x1 convolution of whole blocks of channels), with and
// without a bias and a fused ReLU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model_builder.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

enum class Before { Nothing, DepthwiseSquared, Dense };

struct Case {
  int64_t batch, c, m, h, w, kh, kw;
  Before before;
  bool bias, relu;
};

TEST(ConvTransposePatches, MatchTheSumInEveryLayout) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto values = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& e : v) e = u(rng);
    return v;
  };
  for (const Case c : {Case{2, 13, 5, 5, 7, 2, 3, Before::Nothing, true, false},
                       Case{1, 16, 8, 6, 9, 2, 2, Before::Nothing, false, true},
                       Case{2, 13, 6, 4, 5, 2, 2, Before::DepthwiseSquared, true, true},
                       Case{1, 40, 24, 5, 6, 3, 3, Before::DepthwiseSquared, false, false},
                       Case{2, 16, 8, 6, 5, 2, 2, Before::Dense, true, true},
                       Case{1, 32, 16, 7, 4, 2, 3, Before::Dense, true, false}}) {
    const std::vector<float> w = values(c.c * c.m * c.kh * c.kw), b = values(c.m);
    ModelBuilder mb;
    mb.input("x", 1, {c.batch, c.c, c.h, c.w}).output_any("y", 1);
    mb.initializer("W", {c.c, c.m, c.kh, c.kw}, w).initializer("B", {c.m}, b);
    std::string x = "x";
    if (c.before != Before::Nothing) {  // an identity convolution (exact in fp32)
      const bool dense = c.before == Before::Dense;
      std::vector<float> eye(static_cast<size_t>(dense ? c.c * c.c : c.c), 0.0f);
      for (int64_t i = 0; i < c.c; ++i) eye[static_cast<size_t>(dense ? i * c.c + i : i)] = 1.0f;
      mb.initializer("I", {c.c, dense ? c.c : 1, 1, 1}, eye);
      mb.node("Conv", {"x", "I"}, {"ix"}, [&](auto& n) {
        if (!dense) ModelBuilder::set_int(n, "group", c.c);
      });
      x = "ix";
      if (!dense) {
        mb.node("Mul", {"ix", "ix"}, {"sq"});
        x = "sq";
      }
    }
    std::vector<std::string> ins = {x, "W"};
    if (c.bias) ins.push_back("B");
    mb.node("ConvTranspose", ins, {c.relu ? "t" : "y"}, [&](auto& n) {
      ModelBuilder::set_ints(n, "kernel_shape", {c.kh, c.kw});
      ModelBuilder::set_ints(n, "strides", {c.kh, c.kw});
    });
    if (c.relu) mb.node("Relu", {"t"}, {"y"});
    const std::string bytes = mb.bytes();
    Session s = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
    Tensor in = Tensor::empty(DType::Float, {c.batch, c.c, c.h, c.w});
    for (int64_t i = 0; i < in.numel(); ++i) in.data<float>()[i] = u(rng);
    RunProfile profile;
    const Tensor y = s.run({{"x", in}}, {}, {.profile = &profile})[0].tensor();
    for (const ProfileEvent& e : profile.events) EXPECT_EQ(e.reference, "") << e.node;
    const int64_t oh = c.h * c.kh, ow = c.w * c.kw;
    ASSERT_EQ(y.shape(), (Shape{c.batch, c.m, oh, ow}));
    const float* px = in.data<float>();
    for (int64_t n = 0; n < c.batch; ++n)
      for (int64_t m = 0; m < c.m; ++m)
        for (int64_t r = 0; r < oh; ++r)
          for (int64_t q = 0; q < ow; ++q) {
            double want = c.bias ? b[static_cast<size_t>(m)] : 0.0;
            for (int64_t ch = 0; ch < c.c; ++ch) {
              double v = px[((n * c.c + ch) * c.h + r / c.kh) * c.w + q / c.kw];
              if (c.before == Before::DepthwiseSquared) v *= v;
              want +=
                  v * w[static_cast<size_t>(((ch * c.m + m) * c.kh + r % c.kh) * c.kw + q % c.kw)];
            }
            if (c.relu) want = std::max(want, 0.0);
            // Sums of up to 40 products of order 1 in fp32.
            ASSERT_NEAR(y.data<float>()[((n * c.m + m) * oh + r) * ow + q], want, 1e-4)
                << c.c << "->" << c.m << " channels, kernel " << c.kh << "x" << c.kw << " at (" << n
                << ", " << m << ", " << r << ", " << q << ")";
          }
  }
}

}  // namespace
}  // namespace volt
