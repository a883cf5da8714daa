// 3x3 stride-1 convolutions by Winograd's algorithm (the prefer_winograd pass; volt's F(4x4, 3x3)
// in operators/cpu/conv_winograd.cpp, 16 floats a vector on AVX-512 and 8 on AVX2: ctest runs
// this file a second time with oneDNN, whose instruction set volt's follows, held to AVX2, test
// "winograd_on_avx2"), against the unoptimized graph (oneDNN's direct convolution): channels
// that fill the products' blocks of columns and ones that leave part of one over (and take
// 8-float vectors), maps whose tiles overhang the output, symmetric and asymmetric pads,
// dilations, a batch, bias, a residual added in place, ReLU, Clip, LeakyRelu, Tanh and Sigmoid
// (the last two in lanes by vector_exp), and a second input
// size in the same session (a new plan sharing the transformed weights).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model_builder.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;
using testing::uniform_values;

struct Case {
  int64_t c, m;
  std::vector<int64_t> pads;
  bool bias, residual;
  std::string activation;  // "" or the op after the convolution (fused into it)
  std::vector<int64_t> dilations = {1, 1};
};

// x -> 1x1 Conv (its output, the region's, is stored in blocks) -> 3x3 Conv [-> + the 1x1's
// output] [-> Relu, Clip to [0, 1.5] or LeakyRelu of slope 0.1] -> y.
std::string model(const Case& k, std::mt19937& rng) {
  ModelBuilder b;
  b.input("x", 1, {-1, k.c, -1, -1}).output_any("y", 1);
  b.initializer("W1", {k.c, k.c, 1, 1}, uniform_values(rng, static_cast<size_t>(k.c * k.c)));
  b.initializer("W3", {k.m, k.c, 3, 3},
                uniform_values(rng, static_cast<size_t>(k.m * k.c * 9), -0.2f, 0.2f));
  b.initializer("B3", {k.m}, uniform_values(rng, static_cast<size_t>(k.m)));
  b.initializer("lo", {}, {0.0f}).initializer("hi", {}, {1.5f});
  b.node("Conv", {"x", "W1"}, {"a"});
  std::vector<std::string> inputs = {"a", "W3"};
  if (k.bias) inputs.push_back("B3");
  b.node("Conv", inputs, {"c"}, [&](auto& n) {
    ModelBuilder::set_ints(n, "pads", k.pads);
    ModelBuilder::set_ints(n, "dilations", k.dilations);
  });
  std::string last = "c";
  if (k.residual) {
    b.node("Add", {"c", "a"}, {"s"});
    last = "s";
  }
  if (k.activation == "Clip") {
    b.node("Clip", {last, "lo", "hi"}, {"r"});
  } else if (k.activation == "LeakyRelu") {
    b.node("LeakyRelu", {last}, {"r"}, [](auto& n) { ModelBuilder::set_float(n, "alpha", 0.1f); });
  } else if (!k.activation.empty()) {
    b.node(k.activation, {last}, {"r"});
  }
  if (!k.activation.empty()) last = "r";
  b.node("Identity", {last}, {"y"});
  return b.bytes();
}

TEST(ConvWinograd, MatchesTheDirectConvolution) {
  std::mt19937 rng(23);
  const std::vector<Case> cases = {
      {64, 64, {1, 1, 1, 1}, true, true, "Relu"},        // ResNet's basic block
      {64, 72, {1, 1, 1, 1}, true, false, "LeakyRelu"},  // part of the last column block over
      {128, 64, {0, 2, 1, 0}, false, false, ""},         // asymmetric pads, no epilogue
      {96, 96, {1, 1, 1, 1}, false, true, ""},           // a residual without an activation
      {8, 8, {1, 1, 1, 1}, true, false, "Relu"},         // the fewest channels the pass marks
      {8, 16, {0, 0, 0, 0}, true, false, "Relu"},        // LeNet's second layer, unpadded
      // Dilated (FCN's and DeepLab's backbones): interleaved grids of uneven sizes.
      {64, 64, {2, 2, 2, 2}, true, true, "Relu", {2, 2}},
      {64, 80, {3, 1, 0, 2}, true, false, "Clip", {3, 2}},
      {64, 32, {1, 1, 1, 1}, true, false, "Tanh"},  // ESPCN's super-resolution layers
      {32, 32, {1, 1, 1, 1}, true, false, "Sigmoid"},
  };

  const std::vector<std::vector<int64_t>> sizes = {{2, 14, 14}, {1, 17, 23}, {3, 10, 12}};
  for (const Case& k : cases) {
    const std::string bytes = model(k, rng);
    Session plain = Session::from_bytes(bytes.data(), bytes.size(), {.optimization_level = 0});
    Session opt = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
    for (const auto& size : sizes) {
      SCOPED_TRACE(std::to_string(k.c) + " -> " + std::to_string(k.m) + " channels over " +
                   std::to_string(size[0]) + " x " + std::to_string(size[1]) + " x " +
                   std::to_string(size[2]));
      Tensor x = Tensor::empty(DType::Float, {size[0], k.c, size[1], size[2]});
      const std::vector<float> v = uniform_values(rng, static_cast<size_t>(x.numel()));
      std::copy(v.begin(), v.end(), x.data<float>());
      const Tensor want = plain.run({{"x", x}})[0].tensor();
      const Tensor got = opt.run({{"x", x}})[0].tensor();
      ASSERT_EQ(got.shape(), want.shape());
      // Sums of C x 9 products whose factors are ~4 (the 1x1's outputs) and ~0.1 (weights):
      // outputs up to ~20. F(4x4, 3x3) scales the patch by up to 5 and the transformed weights
      // by up to 1/4 and adds up 36 terms on the way back, so its rounding reaches ~1e-6 of the
      // largest partial sums: within 1e-4 relative, while a wrong tap or transform is off by
      // the size of the outputs themselves.
      double scale = 0;
      for (int64_t i = 0; i < want.numel(); ++i)
        scale = std::max(scale, std::abs(static_cast<double>(want.data<float>()[i])));
      // (Tanh and Sigmoid outputs are at most 1: there 1e-4 absolute.)
      const bool bounded = k.activation == "Tanh" || k.activation == "Sigmoid";
      if (!bounded) {
        ASSERT_GT(scale, 1.0);
      }
      scale = std::max(scale, 1.0);
      for (int64_t i = 0; i < got.numel(); ++i)
        ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-4 * scale) << "at " << i;
    }
  }
}

}  // namespace
}  // namespace volt
