// A pointwise convolution over channels-first tensors runs as one oneDNN matmul per batch
// (operators/cpu/conv_pointwise_matmul.cpp) and computes what the convolution's definition says,
// checked against a double-precision loop here: 1-D (PointNet's, a TCN's projections), and 2-D
// (which the layout passes store channels-last: oneDNN's convolution, checked the same way),
// with and without a bias, with ReLU, a residual Add then ReLU (a sum post-op), and Sigmoid (volt's
// own pass after the primitive) fused, at lengths that are and are not multiples of 16 (the latter
// below 256 keep oneDNN's convolution: the same answer either way), and weights fed at run time.
// Within 1e-5 of the values' scale: float sums of up to 96 products in another order.
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
  int64_t n, c, m;
  std::vector<int64_t> spatial;
  bool bias;
  std::string after;  // "", "Relu", "Residual" (Add of a second input R, then Relu), "Sigmoid"
  bool weights_fed = false;
};

TEST(ConvPointwiseMatmul, MatchesTheDefinition) {
  std::mt19937 rng(23);
  const std::vector<Case> cases = {
      {2, 32, 64, {128}, true, "Relu"},
      {1, 3, 64, {1024}, true, "Relu"},  // PointNet's first layer
      {3, 48, 64, {64}, true, "Residual"},
      {2, 16, 40, {300}, false, ""},     // L not a multiple of 16, long: the matmul
      {2, 16, 32, {100}, true, "Relu"},  // not a multiple of 16, short: oneDNN's convolution
      {2, 24, 32, {8, 16}, true, "Sigmoid"},
      {2, 32, 16, {96}, true, "Relu", true},
  };
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const Case& k : cases) {
    Shape x_shape = {k.n, k.c}, y_shape = {k.n, k.m}, w_shape = {k.m, k.c};
    int64_t l = 1;
    for (int64_t d : k.spatial) {
      x_shape.push_back(d);
      y_shape.push_back(d);
      w_shape.push_back(1);
      l *= d;
    }
    const std::vector<float> w = uniform_values(rng, static_cast<size_t>(k.m * k.c)),
                             b = uniform_values(rng, static_cast<size_t>(k.m));
    ModelBuilder mb;
    mb.input("x", 1, x_shape).output_any("y", 1);
    if (k.after == "Residual") mb.input("r", 1, y_shape);
    if (k.weights_fed)
      mb.input("W", 1, w_shape);
    else
      mb.initializer("W", w_shape, w);
    mb.initializer("B", {k.m}, b);
    std::vector<std::string> inputs = {"x", "W"};
    if (k.bias) inputs.push_back("B");
    const std::string conv_out = k.after.empty() ? "y" : "s";
    mb.node("Conv", inputs, {conv_out});
    if (k.after == "Residual") {
      mb.node("Add", {"s", "r"}, {"a"});
      mb.node("Relu", {"a"}, {"y"});
    } else if (!k.after.empty()) {
      mb.node(k.after, {"s"}, {"y"});
    }
    const std::string bytes = mb.bytes();
    Session session = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
    Tensor x = Tensor::empty(DType::Float, x_shape);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
    Tensor r = Tensor::empty(DType::Float, y_shape);
    for (int64_t i = 0; i < r.numel(); ++i) r.data<float>()[i] = u(rng);
    NamedValues feeds = {{"x", x}};
    if (k.after == "Residual") feeds.emplace_back("r", r);
    if (k.weights_fed) feeds.emplace_back("W", Tensor::from(w, w_shape));
    const Tensor got = session.run(feeds)[0].tensor();
    ASSERT_EQ(got.shape(), y_shape);
    std::vector<double> want(static_cast<size_t>(k.n * k.m * l));
    double scale = 0;
    for (int64_t n = 0; n < k.n; ++n)
      for (int64_t o = 0; o < k.m; ++o)
        for (int64_t p = 0; p < l; ++p) {
          double v = k.bias ? b[static_cast<size_t>(o)] : 0.0;
          for (int64_t c = 0; c < k.c; ++c)
            v += double(w[static_cast<size_t>(o * k.c + c)]) *
                 x.data<float>()[(n * k.c + c) * l + p];
          if (k.after == "Residual") v += r.data<float>()[(n * k.m + o) * l + p];
          if (k.after == "Relu" || k.after == "Residual") v = std::max(v, 0.0);
          if (k.after == "Sigmoid") v = 1.0 / (1.0 + std::exp(-v));
          want[static_cast<size_t>((n * k.m + o) * l + p)] = v;
          scale = std::max(scale, std::abs(v));
        }
    for (int64_t i = 0; i < got.numel(); ++i)
      ASSERT_NEAR(got.data<float>()[i], want[static_cast<size_t>(i)], 1e-5 * scale)
          << "c " << k.c << " m " << k.m << " L " << l << " (" << k.after << ") at " << i;
  }
}

}  // namespace
}  // namespace volt
