// The unary kernels on volt's own vectorizable math against the library's: Erf (vector_erf: a
// series near 0, Abramowitz-Stegun 7.1.26 beyond) against std::erf in double over [-6, 6]
// finely, tiny and huge values, signed zeros, infinities and NaN, within 1e-6 relative
// (measured 5.3e-7); Atan (vector_atan) against std::atan in double within 2e-7; Floor, Ceil and
// Round bit for bit against std::floor, std::ceil and std::nearbyint, halves, values near 2^23,
// signed zeros and non-finite values included.
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

Tensor run_unary(const char* op, const std::vector<float>& x, DType dtype, int opset = 13) {
  const int64_t n = static_cast<int64_t>(x.size());
  ModelBuilder b(opset);
  const int elem = dtype == DType::Float ? 1 : 11;
  b.input("x", elem, {n}).output_any("y", elem).node(op, {"x"}, {"y"});
  const std::string bytes = b.bytes();
  Session s =
      Session::from_bytes(bytes.data(), bytes.size(), testing::test_options({.threads = 2}));
  Tensor in = Tensor::empty(dtype, {n});
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DType::Float)
      in.data<float>()[i] = x[static_cast<size_t>(i)];
    else
      in.data<double>()[i] = x[static_cast<size_t>(i)];
  }
  return s.run({{"x", in}})[0].tensor();
}

TEST(Rounding, FloorCeilAndRoundAsTheLibrary) {
  std::vector<float> x;
  for (int i = -4000; i <= 4000; ++i) x.push_back(static_cast<float>(i) * 0.25f);
  for (float v :
       {0.49999997f, -0.49999997f, 8388607.5f, -8388607.5f, 4194303.5f, 8388608.0f, 5000001.0f,
        -6291457.0f, 16777217.0f, 1e30f, -1e30f, 1e-30f, -1e-30f, -0.0f, 0.0f})
    x.push_back(v);
  x.push_back(std::numeric_limits<float>::infinity());
  x.push_back(-std::numeric_limits<float>::infinity());
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  for (DType dtype : {DType::Float, DType::Double})
    for (const char* op : {"Floor", "Ceil", "Round"}) {
      const Tensor y = run_unary(op, x, dtype);
      for (size_t i = 0; i < x.size(); ++i) {
        const double v = x[i];
        const double want = std::string(op) == "Floor"  ? std::floor(v)
                            : std::string(op) == "Ceil" ? std::ceil(v)
                                                        : std::nearbyint(v);
        const double got = dtype == DType::Float ? y.data<float>()[i] : y.data<double>()[i];
        const bool same = (std::isnan(want) && std::isnan(got)) ||
                          (got == want && std::signbit(got) == std::signbit(want));
        EXPECT_TRUE(same) << op << " " << dtype_name(dtype) << " of " << v << ": " << got
                          << ", not " << want;
      }
    }
}

TEST(Atan, WithinTwoTenMillionthsOfTheLibraryAtan) {
  // Around the folds at 1 and tan(pi/8), tiny and huge values, infinities, signed zeros, NaN.
  std::vector<float> x;
  for (int i = -100000; i <= 100000; ++i) x.push_back(static_cast<float>(i) * 1e-4f);
  for (int i = 1; i <= 2000; ++i) x.push_back(static_cast<float>(i) * 0.5f);
  for (float v : {0.41421354f, 0.41421357f, 0.99999994f, 1.0000001f, 1e-30f, -1e-30f, 3e-8f, 1e10f,
                  -1e10f, 3e38f, -0.0f})
    x.push_back(v);
  x.push_back(std::numeric_limits<float>::infinity());
  x.push_back(-std::numeric_limits<float>::infinity());
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  const Tensor y = run_unary("Atan", x, DType::Float);
  const size_t n = x.size();
  double worst = 0;
  for (size_t i = 0; i + 3 < n; ++i) {
    const double want = std::atan(static_cast<double>(x[i]));
    const double got = y.data<float>()[i];
    worst = std::max(worst, std::abs(got - want) / std::max(std::abs(want), 1e-37));
  }
  EXPECT_LT(worst, 2e-7);
  EXPECT_TRUE(std::signbit(y.data<float>()[n - 4]) && y.data<float>()[n - 4] == 0.0f);
  EXPECT_FLOAT_EQ(y.data<float>()[n - 3], 1.57079632679489662f);
  EXPECT_FLOAT_EQ(y.data<float>()[n - 2], -1.57079632679489662f);
  EXPECT_TRUE(std::isnan(y.data<float>()[n - 1]));
}

// Log, Softplus and Mish (vector_log, vector_log1p, vector_exp, vector_tanh) in ulps of the exact
// value in double: Log within 2 (measured 1.97) over subnormals to 3e38 and finely around 1,
// Softplus within 4 (3.3) and Mish within 8 (6.5; tanh's series near 0 keeps its relative
// accuracy where softplus is tiny) over [-87, 90], where the results are normal floats; pow's
// edge values exactly.
double ulps(double got, double want) {
  const float w = static_cast<float>(std::abs(want));
  return std::abs(got - want) / (static_cast<double>(std::nextafter(w, INFINITY)) - w);
}
TEST(LogSoftplusMish, WithinAFewUlpOfTheExactValues) {
  std::vector<float> x;
  for (int i = 1; i <= 100000; ++i) x.push_back(static_cast<float>(i) * 4e-5f);
  for (int i = -50000; i <= 50000; ++i) x.push_back(1.0f + static_cast<float>(i) * 2e-7f);
  for (float v = 1e-44f; v < 3e38f; v *= 1.37f) x.push_back(v);
  const Tensor y = run_unary("Log", x, DType::Float);
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::log(static_cast<double>(x[i]));
    if (want != 0) worst = std::max(worst, ulps(y.data<float>()[i], want));
  }
  EXPECT_LT(worst, 2.0) << "Log";
  const std::vector<float> edges = {0.0f, -0.0f, -1.0f, INFINITY, -INFINITY, NAN, 1.0f};
  const Tensor e = run_unary("Log", edges, DType::Float);
  EXPECT_EQ(e.data<float>()[0], -INFINITY);
  EXPECT_EQ(e.data<float>()[1], -INFINITY);
  EXPECT_TRUE(std::isnan(e.data<float>()[2]) && std::isnan(e.data<float>()[4]) &&
              std::isnan(e.data<float>()[5]));
  EXPECT_EQ(e.data<float>()[3], INFINITY);
  EXPECT_EQ(e.data<float>()[6], 0.0f);

  std::vector<float> z;
  for (int i = -870000; i <= 900000; ++i) z.push_back(static_cast<float>(i) * 1e-4f);
  const Tensor sp = run_unary("Softplus", z, DType::Float),
               mish = run_unary("Mish", z, DType::Float, 18);
  double worst_sp = 0, worst_mish = 0;
  for (size_t i = 0; i < z.size(); ++i) {
    const double v = z[i], soft = v > 0 ? v + std::log1p(std::exp(-v)) : std::log1p(std::exp(v));
    worst_sp = std::max(worst_sp, ulps(sp.data<float>()[i], soft));
    if (v != 0) worst_mish = std::max(worst_mish, ulps(mish.data<float>()[i], v * std::tanh(soft)));
  }
  EXPECT_LT(worst_sp, 4.0) << "Softplus";
  EXPECT_LT(worst_mish, 8.0) << "Mish";
  const Tensor se = run_unary("Softplus", {-INFINITY, INFINITY, NAN, 0.0f}, DType::Float);
  EXPECT_EQ(se.data<float>()[0], 0.0f);
  EXPECT_EQ(se.data<float>()[1], INFINITY);
  EXPECT_TRUE(std::isnan(se.data<float>()[2]));
  EXPECT_FLOAT_EQ(se.data<float>()[3], 0.693147181f);
}

}  // namespace
}  // namespace volt
