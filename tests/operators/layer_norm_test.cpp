// LayerNormalization's f32 rows loop against the definition computed here in double: widths
// around its vector steps (1, 15-17, 63-65, 96, 200, 768), with and without a bias, rows that
// split across threads unevenly, and rows whose mean is large against their spread (the
// variance taken as E[x^2] - mean^2 loses every digit there). The same rows fed at several
// lengths to one session, as a text model is: plans for varying shapes take the same loop.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model_builder.hpp"
#include "test_options.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

// The largest |got - want| / (1 + |want|) over the rows of x, normalized by the definition.
double worst_error(const std::vector<float>& x, const std::vector<float>& scale,
                   const std::vector<float>* bias, const float* got, int64_t rows, int64_t inner,
                   double epsilon) {
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x.data() + r * inner;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < inner; ++i) mean += row[i];
    mean /= static_cast<double>(inner);
    for (int64_t i = 0; i < inner; ++i) var += (row[i] - mean) * (row[i] - mean);
    var /= static_cast<double>(inner);
    for (int64_t i = 0; i < inner; ++i) {
      const size_t k = static_cast<size_t>(i);
      const double want =
          (row[i] - mean) / std::sqrt(var + epsilon) * scale[k] + (bias ? (*bias)[k] : 0.0);
      worst = std::max(worst, std::abs(got[r * inner + i] - want) / (1 + std::abs(want)));
    }
  }
  return worst;
}

TEST(LayerNormalization, RowsMatchTheDefinition) {
  std::mt19937 rng(83);
  std::uniform_real_distribution<float> u(-2, 3);
  for (const bool with_bias : {true, false})
    for (const int64_t inner : {1, 15, 16, 17, 63, 64, 65, 96, 200, 768})
      for (const int64_t rows : {1, 7, 130}) {
        // The first rows sit at 1000 with a spread of 0.01.
        std::vector<float> x(static_cast<size_t>(rows * inner)), scale(static_cast<size_t>(inner)),
            bias(static_cast<size_t>(inner));
        for (size_t i = 0; i < x.size(); ++i)
          x[i] = i < static_cast<size_t>(3 * inner) ? 1000.0f + 0.01f * u(rng) : u(rng);
        for (float& v : scale) v = u(rng);
        for (float& v : bias) v = u(rng);
        ModelBuilder b(17);
        b.input("x", 1, {1, rows, inner}).output_any("y", 1);
        b.initializer("scale", {inner}, scale);
        if (with_bias) b.initializer("bias", {inner}, bias);
        const float epsilon = 1e-5f;
        b.node("LayerNormalization",
               with_bias ? std::vector<std::string>{"x", "scale", "bias"}
                         : std::vector<std::string>{"x", "scale"},
               {"y"},
               [&](onnx::NodeProto& node) { ModelBuilder::set_float(node, "epsilon", epsilon); });
        const std::string bytes = b.bytes();
        Session s =
            Session::from_bytes(bytes.data(), bytes.size(), testing::test_options({.threads = 2}));
        const Tensor y = s.run({{"x", Tensor::from(x, {1, rows, inner})}})[0].tensor();
        // f32 sums over at most 768 terms: within a few ulp of the normalized values, the rows
        // at 1000 too (the mean taken plainly in f32 put them 1.4% off, a mean held in f32
        // 0.4%; measured now: 1e-6).
        const double tolerance = 5e-6;
        EXPECT_LT(worst_error(x, scale, with_bias ? &bias : nullptr, y.data<float>(), rows, inner,
                              epsilon),
                  tolerance)
            << rows << " rows of " << inner << (with_bias ? " with" : " without") << " bias";
      }
}

TEST(LayerNormalization, EveryLengthOfOneSessionMatchesTheDefinition) {
  std::mt19937 rng(89);
  std::uniform_real_distribution<float> u(-2, 3);
  const int64_t inner = 128;
  std::vector<float> scale(inner), bias(inner);
  for (float& v : scale) v = u(rng);
  for (float& v : bias) v = u(rng);
  ModelBuilder b(17);
  b.input("x", 1, {1, -1, inner}).output_any("y", 1);
  b.initializer("scale", {inner}, scale).initializer("bias", {inner}, bias);
  b.node("LayerNormalization", {"x", "scale", "bias"}, {"y"});
  const std::string bytes = b.bytes();
  Session s =
      Session::from_bytes(bytes.data(), bytes.size(), testing::test_options({.threads = 2}));
  for (const int64_t rows : {64, 20, 48, 200, 33, 64, 1, 129}) {
    std::vector<float> x(static_cast<size_t>(rows * inner));
    for (float& v : x) v = u(rng);
    const Tensor y = s.run({{"x", Tensor::from(x, {1, rows, inner})}})[0].tensor();
    EXPECT_LT(worst_error(x, scale, &bias, y.data<float>(), rows, inner, 1e-5), 2e-6)
        << rows << " rows";
  }
}

}  // namespace
}  // namespace volt
