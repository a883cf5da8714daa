// volt's own Swish and Sigmoid (own_activation.hpp, the pass kernels run where oneDNN's post-op
// costs more) against the functions in double: a fine grid over [-100, 100], tiny and huge
// values, infinities and NaN, at lengths that leave a partial vector at the end.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "operators/common/own_activation.hpp"

namespace volt {
namespace {

using Kind = FusedActivation::Kind;

double exact(Kind kind, double x) {
  const double sigmoid = 1.0 / (1.0 + std::exp(-x));
  return kind == Kind::Swish ? x * sigmoid : sigmoid;
}

TEST(OwnActivation, SwishAndSigmoidWithinAMillionthOfTheExactFunction) {
  FusedActivation swish, sigmoid;
  swish.kind = Kind::Swish;
  sigmoid.kind = Kind::Sigmoid;
  if (!has_own_activation(swish)) GTEST_SKIP() << "no AVX-512 here: oneDNN's post-op serves";
  EXPECT_TRUE(has_own_activation(sigmoid));
  FusedActivation relu;
  relu.kind = Kind::Relu;
  EXPECT_FALSE(has_own_activation(relu));

  std::vector<float> x;
  for (int i = -200000; i <= 200000; ++i) x.push_back(static_cast<float>(i) * 5e-4f);
  for (float v : {1e-30f, -1e-30f, 1e-8f, -1e-8f, 86.9f, 87.1f, -87.9f, -88.1f, -103.0f, 1e10f,
                  -1e10f, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()})
    x.push_back(v);
  const size_t finite = x.size();
  const float inf = std::numeric_limits<float>::infinity();
  x.insert(x.end(), {inf, -inf, std::numeric_limits<float>::quiet_NaN(), 0.5f});
  for (const FusedActivation& act : {swish, sigmoid}) {
    for (size_t length : {x.size(), x.size() - 1, size_t{7}}) {  // partial vectors at the end
      SCOPED_TRACE((act.kind == Kind::Swish ? "Swish, " : "Sigmoid, ") + std::to_string(length));
      std::vector<float> y(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(length));
      apply_own_activation(act, y.data(), static_cast<int64_t>(length));
      for (size_t i = 0; i < std::min(length, finite); ++i) {
        const double want = exact(act.kind, x[i]);
        ASSERT_LE(std::abs(y[i] - want), std::max(1e-6 * std::abs(want), 1e-36))
            << "x = " << x[i] << ": " << y[i] << " against " << want;
      }
      if (length <= finite) continue;
      EXPECT_EQ(y[finite], act.kind == Kind::Swish ? inf : 1.0f);
      // -inf: the sigmoid 0; the swish -inf·0, NaN, as x / (1 + exp(-x)) gives it.
      if (act.kind == Kind::Swish) {
        EXPECT_TRUE(std::isnan(y[finite + 1]));
      } else {
        EXPECT_EQ(y[finite + 1], 0.0f);
      }
      EXPECT_TRUE(std::isnan(y[finite + 2]));
      if (length > finite + 3) {
        EXPECT_NEAR(y[finite + 3], exact(act.kind, 0.5), 1e-6);
      }
    }
  }
}

}  // namespace
}  // namespace volt
