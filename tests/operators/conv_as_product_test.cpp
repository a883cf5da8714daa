// A convolution in a plan built for one of several input shapes, where no kernel of its own takes
// it, runs as one product over its gathered windows (operators/cpu/conv_as_product.cpp, on CPUs
// with AVX-512; elsewhere the bucketed oneDNN primitive) and computes what a fresh session's
// oneDNN convolution for the exact shape computes: a text-line recognizer's height-collapsing 2x1
// window, strided and dilated windows with asymmetric pads, channel counts that leave the last
// block of 16 part empty, with and without a bias, ReLU, Clip and LeakyRelu fused, X read from a
// graph input (channels-first) or from the convolution before it (the region's stored layout),
// Y read by a 1x1 convolution (the region's layout); and weights too large for the product, which
// keep the bucketed primitive. Within 1e-5 of the values' scale: the product sums each window's
// taps in another order than oneDNN does.
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
  int64_t c, m, kh, kw, height;
  std::vector<int64_t> strides, dilations, pads;
  bool bias;
  std::string activation;  // "" or the op after the convolution (fused into it)
  bool after_conv;         // X comes from a 3 -> C convolution, else it is the graph's input
};

std::string model(const Case& k, std::mt19937& rng) {
  ModelBuilder b;
  b.input("x", 1, {-1, k.after_conv ? 3 : k.c, k.height, -1}).output_any("y", 1);
  b.initializer("W0", {k.c, 3, 3, 3}, uniform_values(rng, static_cast<size_t>(k.c * 27)));
  b.initializer("W", {k.m, k.c, k.kh, k.kw},
                uniform_values(rng, static_cast<size_t>(k.m * k.c * k.kh * k.kw)));
  b.initializer("B", {k.m}, uniform_values(rng, static_cast<size_t>(k.m)));
  b.initializer("W1", {16, k.m, 1, 1}, uniform_values(rng, static_cast<size_t>(16 * k.m)));
  b.initializer("lo", {}, {-0.5f}).initializer("hi", {}, {1.0f});
  std::string x = "x";
  if (k.after_conv) {
    b.node("Conv", {"x", "W0"}, {"x0"}, [](auto& n) {
      ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
    });
    x = "x0";
  }
  std::vector<std::string> inputs = {x, "W"};
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

TEST(ConvAsProduct, MatchesOneDnnInPlansForSeveralWidths) {
  std::mt19937 rng(23);
  const std::vector<Case> cases = {
      // A recognizer's last convolution: the height of 2 into 1, 20 -> 24 channels.
      {20, 24, 2, 1, 2, {1, 1}, {1, 1}, {0, 0, 0, 0}, true, "Relu", true},
      {20, 24, 2, 1, 2, {1, 1}, {1, 1}, {0, 0, 0, 0}, true, "Relu", false},
      {32, 40, 3, 3, 12, {2, 2}, {1, 1}, {1, 0, 0, 1}, true, "Clip", true},
      {16, 33, 1, 3, 6, {1, 1}, {1, 2}, {0, 2, 0, 1}, false, "LeakyRelu", true},
      {48, 64, 3, 2, 9, {1, 2}, {2, 1}, {2, 0, 1, 1}, true, "", false},
      // Weights past the product's limit (2^18): the bucketed primitive, as without AVX-512.
      {160, 320, 3, 2, 5, {1, 2}, {1, 1}, {1, 1, 1, 0}, true, "Relu", false},
  };
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const Case& k : cases) {
    SCOPED_TRACE("c " + std::to_string(k.c) + " m " + std::to_string(k.m) + " window " +
                 std::to_string(k.kh) + "x" + std::to_string(k.kw));
    const std::string bytes = model(k, rng);
    Session varying = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
    for (int64_t w : {33, 48, 7, 130, 33}) {  // (the first builds the session's one-shape plan)
      SCOPED_TRACE("width " + std::to_string(w));
      Tensor x = Tensor::empty(DType::Float, {2, k.after_conv ? 3 : k.c, k.height, w});
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
      Session fresh = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
      const Tensor want = fresh.run({{"x", x}})[0].tensor();
      RunProfile profile;
      const Tensor got = varying.run({{"x", x}}, {}, {.profile = &profile})[0].tensor();
      for (const ProfileEvent& e : profile.events) EXPECT_EQ(e.reference, "") << e.node;
      ASSERT_EQ(got.shape(), want.shape());
      float scale = 0;
      for (int64_t i = 0; i < want.numel(); ++i)
        scale = std::max(scale, std::abs(want.data<float>()[i]));
      for (int64_t i = 0; i < got.numel(); ++i)
        ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5f * scale) << "at " << i;
    }
  }
}

}  // namespace
}  // namespace volt
