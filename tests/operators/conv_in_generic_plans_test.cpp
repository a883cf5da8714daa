// Convolutions in plans built for one of several input shapes (InferContext::shapes_vary) compute
// what a fresh session's oneDNN convolution for the exact shape computes, at each width:
// - a stem over few channels (input channels x taps <= 32) runs volt's direct loop
//   (operators/cpu/conv_few_channels.cpp): one or several input channels, a square, oblong or
//   strided window, dilations, asymmetric pads, output channels that fill the loop's 16 columns or
//   leave 8 of them over;
// - one no kernel of its own takes runs as one product over its gathered windows
//   (operators/cpu/conv_as_product.cpp, on CPUs with AVX-512; elsewhere the bucketed oneDNN
//   primitive): a text-line recognizer's height-collapsing 2x1 window, strided and dilated
//   windows with asymmetric pads, channel counts that leave the last block of 16 part empty, X
//   read from a graph input (channels-first) or from the convolution before it (the region's
//   stored layout); and weights too large for the product, which keep the bucketed primitive;
// with and without a bias, ReLU, Clip and LeakyRelu fused, Y read by a 1x1 convolution (the
// region's layout). Within 2e-6 (the loop) and 1e-5 (the product, which sums more taps) of the
// values' scale: both sum a window's taps in another order than oneDNN.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "loaders/loader.hpp"
#include "model_builder.hpp"
#include "operators/common/cpu_isa.hpp"
#include "operators/cpu/conv_as_product.hpp"
#include "runtime/contexts.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;
using testing::uniform_values;

struct Case {
  int64_t c, m, kh, kw;
  std::vector<int64_t> strides, dilations, pads;
  bool bias;
  std::string activation;  // "" or the op after the convolution (fused into it)
  int64_t height = 20;
  bool after_conv = false;  // X comes from a 3 -> C convolution, else it is the graph's input
};

std::string model(const Case& k, std::mt19937& rng) {
  ModelBuilder b;
  b.input("x", 1, {-1, k.after_conv ? 3 : k.c, k.height, -1}).output_any("y", 1);
  b.initializer("W0", {k.c, 3, 3, 3}, uniform_values(rng, static_cast<size_t>(k.c * 27)));
  b.initializer("W", {k.m, k.c, k.kh, k.kw},
                uniform_values(rng, static_cast<size_t>(k.m * k.c * k.kh * k.kw)));
  b.initializer("B", {k.m}, uniform_values(rng, static_cast<size_t>(k.m)));
  b.initializer("W1", {16, k.m, 1, 1}, uniform_values(rng, static_cast<size_t>(16 * k.m)));
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
  const std::string last = b.activation(k.activation, "s");
  b.node("Conv", {last, "W1"}, {"y"});
  return b.bytes();
}

// Each case at widths 33, 48, 7, 130, 33 (the first builds the session's one-shape plan) against
// a fresh session, within `tolerance` of the values' scale; no node on a reference loop.
void expect_fresh_sessions_results(const std::vector<Case>& cases, float tolerance,
                                   std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const Case& k : cases) {
    SCOPED_TRACE("c " + std::to_string(k.c) + " m " + std::to_string(k.m) + " window " +
                 std::to_string(k.kh) + "x" + std::to_string(k.kw));
    const std::string bytes = model(k, rng);
    Session varying = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
    for (int64_t w : {33, 48, 7, 130, 33}) {
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
        ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], tolerance * scale) << "at " << i;
    }
  }
}

TEST(ConvFewChannels, MatchesOneDnnInPlansForSeveralWidths) {
  std::mt19937 rng(5);
  expect_fresh_sessions_results(
      {
          {1, 32, 3, 3, {1, 1}, {1, 1}, {1, 1, 1, 1}, true, "Relu"},  // a recognizer's stem
          {3, 16, 3, 3, {2, 2}, {1, 1}, {1, 1, 0, 0}, true, "Clip"},  // strided, asymmetric pads
          {3, 24, 3, 3, {1, 1}, {2, 2}, {2, 2, 2, 2}, false, "LeakyRelu"},  // 8 columns over
          {2, 8, 2, 3, {1, 2}, {1, 1}, {0, 1, 1, 0}, true, ""},   // oblong, one group of 8
          {1, 32, 4, 4, {4, 4}, {1, 1}, {0, 0, 0, 0}, true, ""},  // patches
      },
      2e-6f, rng);
}

TEST(ConvAsProduct, MatchesOneDnnInPlansForSeveralWidths) {
  std::mt19937 rng(23);
  expect_fresh_sessions_results(
      {
          // A recognizer's last convolution: the height of 2 into 1, 20 -> 24 channels.
          {20, 24, 2, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}, true, "Relu", 2, true},
          {20, 24, 2, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}, true, "Relu", 2, false},
          {32, 40, 3, 3, {2, 2}, {1, 1}, {1, 0, 0, 1}, true, "Clip", 12, true},
          {16, 33, 1, 3, {1, 1}, {1, 2}, {0, 2, 0, 1}, false, "LeakyRelu", 6, true},
          {48, 64, 3, 2, {1, 2}, {2, 1}, {2, 0, 1, 1}, true, "", 9, false},
          // Weights past the product's limit (2^18): the bucketed primitive, as without AVX-512.
          {160, 320, 3, 2, {1, 2}, {1, 1}, {1, 1, 1, 0}, true, "Relu", 5, false},
      },
      1e-5f, rng);
}

// The product's own writes for each stored layout of Y, channels-first among them (which the
// layout passes give no convolution of the models above), and its reads of channels-first X:
// called on a node's infer context directly, against the reference loop, a 3x3 window with pads
// over 20 channels into 24 (the last block of 16 part empty), within 1e-5 of the values' scale.
TEST(ConvAsProduct, WritesEveryStoredLayoutOfY) {
  if (!cpu_has_avx512() || !cpu_has_avx512f()) GTEST_SKIP() << "the product runs with AVX-512";
  std::mt19937 rng(29);
  const int64_t n = 2, c = 20, m = 24, h = 5, w = 7;
  ModelBuilder b;
  b.input("x", 1, {n, c, h, w}).output_any("y", 1);
  b.initializer("W", {m, c, 3, 3}, uniform_values(rng, static_cast<size_t>(m * c * 9)));
  b.initializer("B", {m}, uniform_values(rng, static_cast<size_t>(m)));
  b.node("Conv", {"x", "W", "B"}, {"y"}, [](auto& node) {
    ModelBuilder::set_ints(node, "pads", {1, 0, 1, 2});
  });
  const std::string bytes = b.bytes();
  const Model model = load_model_from_bytes(bytes.data(), bytes.size());
  const Node& node = model.graph.nodes[0];
  const Tensor& weights = model.graph.initializers.at("W");
  const Tensor& bias = model.graph.initializers.at("B");
  const ConvShapes s = conv_shapes(WindowAttributes(node), 1, {n, c, h, w}, weights.shape(), node);
  const std::vector<float> x = uniform_values(rng, static_cast<size_t>(n * c * h * w));
  std::vector<float> want(static_cast<size_t>(numel_of(s.out)));
  reference_conv(s, x.data(), weights.data<float>(), bias.data<float>(), want.data());
  float scale = 0;
  for (float v : want) scale = std::max(scale, std::abs(v));
  const int64_t oh = s.out[2], ow = s.out[3];
  const TypeShape x_type{ValueInfo::Kind::Tensor, DType::Float, {n, c, h, w}, true};
  const TypeShape w_type = TypeShape::of(weights), b_type = TypeShape::of(bias);
  const Value w_value = weights, b_value = bias;
  const std::vector<const TypeShape*> types = {&x_type, &w_type, &b_type};
  const std::vector<const Value*> values = {nullptr, &w_value, &b_value};
  for (const StoredLayout layout :
       {StoredLayout::ChannelsFirst, StoredLayout::ChannelsLast, StoredLayout::Blocked16}) {
    SCOPED_TRACE("Y stored as layout " + std::to_string(static_cast<int>(layout)));
    NodeInferContext ctx(node, types, values, 2, /*shapes_vary=*/true);
    const auto p = plan_conv_as_product(ctx, s, weights, true, FusedActivation{},
                                        StoredLayout::ChannelsFirst, layout);
    ASSERT_TRUE(p);
    std::vector<float> scratch(ctx.scratch_bytes / sizeof(float) + 16);
    float* aligned = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) &
                                              ~uintptr_t{63});
    const int64_t blocks = (m + 15) / 16;
    std::vector<float> y(static_cast<size_t>(n * blocks * 16 * oh * ow), -7.0f);
    run_conv_as_product(*p, x.data(), bias.data<float>(), y.data(), aligned, 2);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t o = 0; o < m; ++o)
        for (int64_t r = 0; r < oh * ow; ++r) {
          const int64_t at = layout == StoredLayout::ChannelsFirst ? (i * m + o) * oh * ow + r
                             : layout == StoredLayout::ChannelsLast
                                 ? (i * oh * ow + r) * m + o
                                 : ((i * blocks + o / 16) * oh * ow + r) * 16 + o % 16;
          ASSERT_NEAR(y[static_cast<size_t>(at)],
                      want[static_cast<size_t>((i * m + o) * oh * ow + r)], 1e-5f * scale)
              << "image " << i << " channel " << o << " pixel " << r;
        }
    if (layout == StoredLayout::Blocked16) {  // (the last block's channels past M: zeros)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t r = 0; r < oh * ow; ++r)
          for (int64_t o = m; o < blocks * 16; ++o)
            ASSERT_EQ(y[static_cast<size_t>(((i * blocks + o / 16) * oh * ow + r) * 16 + o % 16)],
                      0.0f);
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
