// The f32 Erf kernel (vector_erf: a series near 0, Abramowitz-Stegun 7.1.26 beyond) against
// std::erf in double over [-6, 6] finely, tiny and huge values, signed zeros, infinities and
// NaN: within 1e-6 relative (measured 5.3e-7).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "model_builder.hpp"
#include "test_options.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

TEST(Erf, WithinAMillionthOfTheLibraryErf) {
  std::vector<float> x;
  for (int i = -60000; i <= 60000; ++i) x.push_back(static_cast<float>(i) * 1e-4f);
  for (float v :
       {1e-30f, -1e-30f, 1e-8f, 3e-5f, 0.4999f, 0.5f, 0.5001f, 3.99f, 4.01f, 1e10f, -1e10f})
    x.push_back(v);
  x.push_back(std::numeric_limits<float>::infinity());
  x.push_back(-std::numeric_limits<float>::infinity());
  x.push_back(-0.0f);
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  const int64_t n = static_cast<int64_t>(x.size());
  ModelBuilder b(13);
  b.input("x", 1, {n}).output_any("y", 1).node("Erf", {"x"}, {"y"});
  const std::string bytes = b.bytes();
  Session s =
      Session::from_bytes(bytes.data(), bytes.size(), testing::test_options({.threads = 2}));
  const Tensor y = s.run({{"x", Tensor::from(x, {n})}})[0].tensor();
  double worst = 0;
  for (int64_t i = 0; i + 2 < n; ++i) {
    const double want = std::erf(static_cast<double>(x[static_cast<size_t>(i)]));
    const double got = y.data<float>()[i];
    worst = std::max(worst, std::abs(got - want) / std::max(std::abs(want), 1e-37));
  }
  EXPECT_LT(worst, 1e-6);
  EXPECT_TRUE(std::signbit(y.data<float>()[n - 2]) && y.data<float>()[n - 2] == 0.0f);
  EXPECT_TRUE(std::isnan(y.data<float>()[n - 1]));
}

}  // namespace
}  // namespace volt
