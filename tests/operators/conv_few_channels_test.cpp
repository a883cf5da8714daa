// A stem over few channels (input channels x taps <= 32) in a plan built for one of several input
// shapes runs volt's direct loop (operators/cpu/conv_few_channels.cpp) and computes what a fresh
// session's oneDNN convolution for the exact shape computes: one or several input channels, a
// square, oblong or strided window, dilations, asymmetric pads, output channels that fill the
// loop's 16 columns or leave 8 of them over, with and without a bias, ReLU, Clip and LeakyRelu
// fused, X stored channels-first (a graph input) and Y in the region's blocks (a 1x1 convolution
// reads it). Within 2e-6 of the values' scale: the loop sums a patch's taps in another order.
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
  int64_t c, m, kh, kw;
  std::vector<int64_t> strides, dilations, pads;
  bool bias;
  std::string activation;  // "" or the op after the stem (fused into it)
};

std::string model(const Case& k, std::mt19937& rng) {
  ModelBuilder b;
  b.input("x", 1, {-1, k.c, 20, -1}).output_any("y", 1);
  b.initializer("W", {k.m, k.c, k.kh, k.kw},
                uniform_values(rng, static_cast<size_t>(k.m * k.c * k.kh * k.kw)));
  b.initializer("B", {k.m}, uniform_values(rng, static_cast<size_t>(k.m)));
  b.initializer("W1", {16, k.m, 1, 1}, uniform_values(rng, static_cast<size_t>(16 * k.m)));
  b.initializer("lo", {}, {-0.5f}).initializer("hi", {}, {1.0f});
  std::vector<std::string> inputs = {"x", "W"};
  if (k.bias) inputs.push_back("B");
  b.node("Conv", inputs, {"s"}, [&](auto& n) {
    ModelBuilder::set_ints(n, "strides", k.strides);
    ModelBuilder::set_ints(n, "dilations", k.dilations);
    ModelBuilder::set_ints(n, "pads", k.pads);
  });
  std::string last = "s";
  if (k.activation == "Clip") {
    b.node("Clip", {last, "lo", "hi"}, {"a"});
  } else if (k.activation == "LeakyRelu") {
    b.node("LeakyRelu", {last}, {"a"}, [](auto& n) { ModelBuilder::set_float(n, "alpha", 0.1f); });
  } else if (!k.activation.empty()) {
    b.node(k.activation, {last}, {"a"});
  }
  if (!k.activation.empty()) last = "a";
  b.node("Conv", {last, "W1"}, {"y"});
  return b.bytes();
}

TEST(ConvFewChannels, MatchesOneDnnInPlansForSeveralWidths) {
  std::mt19937 rng(5);
  const std::vector<Case> cases = {
      {1, 32, 3, 3, {1, 1}, {1, 1}, {1, 1, 1, 1}, true, "Relu"},  // a text-line recognizer's stem
      {3, 16, 3, 3, {2, 2}, {1, 1}, {1, 1, 0, 0}, true, "Clip"},  // strided, asymmetric pads
      {3, 24, 3, 3, {1, 1}, {2, 2}, {2, 2, 2, 2}, false, "LeakyRelu"},  // dilated, 8 columns over
      {2, 8, 2, 3, {1, 2}, {1, 1}, {0, 1, 1, 0}, true, ""},   // an oblong window, one group of 8
      {1, 32, 4, 4, {4, 4}, {1, 1}, {0, 0, 0, 0}, true, ""},  // patches
  };
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const Case& k : cases) {
    const std::string bytes = model(k, rng);
    Session varying = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
    for (int64_t w : {33, 48, 7, 130, 33}) {  // (the first builds the session's one-shape plan)
      Tensor x = Tensor::empty(DType::Float, {2, k.c, 20, w});
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
      Session fresh = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
      const Tensor want = fresh.run({{"x", x}})[0].tensor();
      const Tensor got = varying.run({{"x", x}})[0].tensor();
      ASSERT_EQ(got.shape(), want.shape()) << "c " << k.c << " width " << w;
      float scale = 0;
      for (int64_t i = 0; i < want.numel(); ++i)
        scale = std::max(scale, std::abs(want.data<float>()[i]));
      for (int64_t i = 0; i < got.numel(); ++i)
        ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 2e-6f * scale)
            << "c " << k.c << " m " << k.m << " width " << w << " at " << i;
    }
  }
}

}  // namespace
}  // namespace volt

namespace volt {
namespace {

// Eight output channels take the loop in every plan (oneDNN's AVX-512 kernels block sixteen): a
// session's first plan for a 1 -> 8 stem (LeNet's) computes what oneDNN computes for the same stem
// widened to 16 channels whose extra weights the 1x1 convolution after it multiplies by zero.
TEST(ConvFewChannels, EightChannelsInASessionsFirstPlanMatchOneDnn) {
  std::mt19937 rng(17);
  const std::vector<float> w8 = uniform_values(rng, 8 * 9), b8 = uniform_values(rng, 8),
                           w1 = uniform_values(rng, 16 * 8);
  auto model = [&](int64_t m) {
    std::vector<float> w(w8), b(b8), w1m(static_cast<size_t>(16 * m), 0.0f);
    w.resize(static_cast<size_t>(m * 9), 0.5f);
    b.resize(static_cast<size_t>(m), 0.25f);
    for (int64_t o = 0; o < 16; ++o)
      for (int64_t c = 0; c < 8; ++c)
        w1m[static_cast<size_t>(o * m + c)] = w1[static_cast<size_t>(o * 8 + c)];
    ModelBuilder b_;
    b_.input("x", 1, {64, 1, 28, 28}).output_any("y", 1);
    b_.initializer("W", {m, 1, 3, 3}, w)
        .initializer("B", {m}, b)
        .initializer("W1", {16, m, 1, 1}, w1m);
    b_.node("Conv", {"x", "W", "B"}, {"s"}, [](auto& n) {
      ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
    });
    b_.node("Relu", {"s"}, {"r"});
    b_.node("Conv", {"r", "W1"}, {"y"});
    return b_.bytes();
  };
  const std::string eight = model(8), sixteen = model(16);
  Tensor x = Tensor::empty(DType::Float, {64, 1, 28, 28});
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
  const Tensor got =
      Session::from_bytes(eight.data(), eight.size(), {.threads = 2}).run({{"x", x}})[0].tensor();
  const Tensor want = Session::from_bytes(sixteen.data(), sixteen.size(), {.threads = 2})
                          .run({{"x", x}})[0]
                          .tensor();
  ASSERT_EQ(got.shape(), want.shape());
  float scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i)
    scale = std::max(scale, std::abs(want.data<float>()[i]));
  for (int64_t i = 0; i < got.numel(); ++i)
    ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 2e-6f * scale) << "at " << i;
}

}  // namespace
}  // namespace volt
