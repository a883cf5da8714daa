// 2-D ConvTranspose on channels-last or blocked data runs as a 1x1 convolution to
// M x kh x kw channels and a gather of each output's taps (operators/cpu/conv_transpose_gather):
// a permutation where the kernel equals the strides (a U-Net's 2x2 stride-2 upsampling), sums
// of overlapping taps elsewhere (strides, pads, dilations, output_padding). Checked against the
// sum written out here: a lone node (X channels-first: oneDNN's deconvolution), Y channels-last
// (after a depthwise convolution and a square, which keep the region channels-last) and in
// blocks (after a 1x1 convolution of whole blocks of channels), with and without a bias and a
// fused ReLU (or Tanh, Sigmoid), and groups.
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
  // Strides, dilations, pads (begin, end) and output_padding; strides = kernel where empty.
  std::vector<int64_t> strides = {}, dilations = {1, 1}, pads = {0, 0, 0, 0},
                       output_padding = {0, 0};
  int64_t group = 1;
  std::string activation = "Relu";  // the op after it, where `relu` says there is one
};

TEST(ConvTransposeGathered, MatchTheSumInEveryLayout) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto values = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& e : v) e = u(rng);
    return v;
  };
  // clang-format off
  const std::vector<Case> cases = {
      // Kernel == strides (one tap each): a lone node, channels-last, blocks.
      {2, 13, 5, 5, 7, 2, 3, Before::Nothing, true, false},
      {1, 16, 8, 6, 9, 2, 2, Before::Nothing, false, true},
      {2, 13, 6, 4, 5, 2, 2, Before::DepthwiseSquared, true, true},
      {1, 40, 24, 5, 6, 3, 3, Before::DepthwiseSquared, false, false},
      {2, 16, 8, 6, 5, 2, 2, Before::Dense, true, true},
      {1, 32, 16, 7, 4, 2, 3, Before::Dense, true, false},
      // Overlapping taps: a 3x3 stride-2 decoder, a 4x4 stride-2 GAN layer, a stride-1 3x3,
      // dilation and asymmetric pads.
      {2, 16, 8, 5, 6, 3, 3, Before::Dense, true, true, {2, 2}, {1, 1}, {1, 1, 1, 1}, {1, 1}},
      {1, 16, 16, 4, 5, 4, 4, Before::Dense, false, true, {2, 2}, {1, 1}, {1, 1, 1, 1}},
      {1, 24, 8, 6, 5, 3, 3, Before::DepthwiseSquared, true, false, {1, 1}, {1, 1}, {1, 1, 1, 1}},
      // 5x5 of stride 1: Z would be 25 times Y, so the deconvolution.
      {1, 16, 8, 6, 5, 5, 5, Before::Dense, true, true, {1, 1}, {1, 1}, {2, 2, 2, 2}},
      {2, 13, 7, 5, 4, 3, 2, Before::DepthwiseSquared, true, true, {2, 3}, {2, 1}, {1, 0, 2, 1},
       {1, 0}},
      // Groups: the corpus U-Net's 3x3 stride-2 decoder of two groups, two channels-last, and
      // four of 4 channels (not whole blocks: the deconvolution).
      {1, 16, 16, 6, 5, 3, 3, Before::Dense, true, true, {2, 2}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 2},
      {1, 24, 12, 5, 4, 3, 3, Before::DepthwiseSquared, true, false, {2, 2}, {1, 1}, {1, 1, 1, 1}, {0, 0}, 2},
      {2, 32, 16, 4, 4, 2, 2, Before::Dense, true, false, {}, {1, 1}, {0, 0, 0, 0}, {0, 0}, 4},
      // A GAN generator's last layer: 4x4 stride 2 into Tanh (in lanes by vector_exp), Sigmoid.
      {1, 16, 16, 4, 5, 4, 4, Before::Dense, true, true, {2, 2}, {1, 1}, {1, 1, 1, 1}, {0, 0}, 1, "Tanh"},
      {2, 16, 8, 5, 6, 3, 3, Before::Dense, true, true, {2, 2}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1, "Sigmoid"}};
  // clang-format on
  for (const Case& c : cases) {
    const int64_t mg = c.m / c.group;  // output channels per group; W is [C, M / G, kh, kw]
    const std::vector<float> w_values = values(c.c * mg * c.kh * c.kw), b = values(c.m);
    ModelBuilder mb;
    mb.input("x", 1, {c.batch, c.c, -1, -1}).output_any("y", 1);
    mb.initializer("W", {c.c, mg, c.kh, c.kw}, w_values).initializer("B", {c.m}, b);
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
    const std::vector<int64_t> strides =
        c.strides.empty() ? std::vector<int64_t>{c.kh, c.kw} : c.strides;
    mb.node("ConvTranspose", ins, {c.relu ? "t" : "y"}, [&](auto& n) {
      ModelBuilder::set_ints(n, "kernel_shape", {c.kh, c.kw});
      ModelBuilder::set_ints(n, "strides", strides);
      ModelBuilder::set_ints(n, "dilations", c.dilations);
      ModelBuilder::set_ints(n, "pads", c.pads);
      ModelBuilder::set_ints(n, "output_padding", c.output_padding);
      ModelBuilder::set_int(n, "group", c.group);
    });
    if (c.relu) mb.node(c.activation, {"t"}, {"y"});
    const std::string bytes = mb.bytes();
    Session s = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
    // A second size: a plan for several shapes, after the first plan released W's own bytes
    // for its packed copy (they come back through the reverse reorders).
    for (const auto& [height, width] : {std::pair{c.h, c.w}, std::pair{c.h + 2, c.w + 1}}) {
      Tensor in = Tensor::empty(DType::Float, {c.batch, c.c, height, width});
      for (int64_t i = 0; i < in.numel(); ++i) in.data<float>()[i] = u(rng);
      RunProfile profile;
      const Tensor y = s.run({{"x", in}}, {}, {.profile = &profile})[0].tensor();
      for (const ProfileEvent& e : profile.events) EXPECT_EQ(e.reference, "") << e.node;
      const int64_t sh = strides[0], sw = strides[1], dh = c.dilations[0], dw = c.dilations[1];
      const int64_t oh = (height - 1) * sh + (c.kh - 1) * dh + 1 - c.pads[0] - c.pads[2] +
                         c.output_padding[0],
                    ow = (width - 1) * sw + (c.kw - 1) * dw + 1 - c.pads[1] - c.pads[3] +
                         c.output_padding[1];
      ASSERT_EQ(y.shape(), (Shape{c.batch, c.m, oh, ow}));
      // The sum, scattered from each input pixel and tap.
      std::vector<double> want(static_cast<size_t>(c.batch * c.m * oh * ow), 0.0);
      const float* px = in.data<float>();
      for (int64_t n = 0; n < c.batch; ++n)
        for (int64_t ch = 0; ch < c.c; ++ch)
          for (int64_t h = 0; h < height; ++h)
            for (int64_t w = 0; w < width; ++w) {
              double v = px[((n * c.c + ch) * height + h) * width + w];
              if (c.before == Before::DepthwiseSquared) v *= v;
              for (int64_t i = 0; i < c.kh; ++i)
                for (int64_t j = 0; j < c.kw; ++j) {
                  const int64_t r = h * sh - c.pads[0] + i * dh, q = w * sw - c.pads[1] + j * dw;
                  if (r < 0 || r >= oh || q < 0 || q >= ow) continue;
                  for (int64_t ml = 0; ml < mg; ++ml) {  // the outputs of ch's group
                    const int64_t m = ch / (c.c / c.group) * mg + ml;
                    want[static_cast<size_t>(((n * c.m + m) * oh + r) * ow + q)] +=
                        v * w_values[static_cast<size_t>(((ch * mg + ml) * c.kh + i) * c.kw + j)];
                  }
                }
            }
      for (int64_t n = 0; n < c.batch; ++n)
        for (int64_t m = 0; m < c.m; ++m)
          for (int64_t r = 0; r < oh; ++r)
            for (int64_t q = 0; q < ow; ++q) {
              double e = want[static_cast<size_t>(((n * c.m + m) * oh + r) * ow + q)];
              if (c.bias) e += b[static_cast<size_t>(m)];
              if (c.relu)
                e = c.activation == "Tanh"      ? std::tanh(e)
                    : c.activation == "Sigmoid" ? 1 / (1 + std::exp(-e))
                                                : std::max(e, 0.0);
              // Sums of up to 40 x 9 products of order 1 in fp32.
              ASSERT_NEAR(y.data<float>()[((n * c.m + m) * oh + r) * ow + q], e, 2e-4)
                  << c.c << "->" << c.m << " channels, " << height << "x" << width << ", kernel "
                  << c.kh << "x" << c.kw << " at (" << n << ", " << m << ", " << r << ", " << q
                  << ")";
            }
    }
  }
}

}  // namespace
}  // namespace volt
