// The dynamic loss scaler's state machine (mixed-precision training's overflow handling).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "runtime/training/loss_scaler.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

TEST(LossScaler, StartsAt2To16HalvesAndSkipsOnOverflow) {
  LossScaler s;
  EXPECT_EQ(s.scale(), 65536.f);
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 32768.f);
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 16384.f);
  EXPECT_EQ(s.skipped_steps(), 2);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 16384.f);
}

TEST(LossScaler, DoublesAfter2000CleanStepsInARow) {
  LossScaler s;
  for (int i = 0; i < 1999; ++i) ASSERT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 65536.f);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 131072.f);
  EXPECT_EQ(s.clean_steps(), 0);
  // An overflow resets the count: 1999 more clean steps do not double it again.
  for (int i = 0; i < 1000; ++i) s.update(true);
  s.update(false);
  EXPECT_EQ(s.scale(), 65536.f);
  for (int i = 0; i < 1999; ++i) s.update(true);
  EXPECT_EQ(s.scale(), 65536.f);
  s.update(true);
  EXPECT_EQ(s.scale(), 131072.f);
}

TEST(LossScaler, StaysWithinItsBounds) {
  LossScaler s({.initial_scale = 4.f, .growth_interval = 1, .min_scale = 1.f, .max_scale = 16.f});
  for (int i = 0; i < 10; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 1.f);
  for (int i = 0; i < 10; ++i) s.update(true);
  EXPECT_EQ(s.scale(), 16.f);
  EXPECT_THROW(LossScaler({.initial_scale = 0.f}), Error);
  EXPECT_THROW(LossScaler({.backoff_factor = 1.5f}), Error);
}

TEST(LossScaler, UnscalingFindsOverflowAnywhere) {
  std::vector<float> g(1001, 65536.f);
  EXPECT_TRUE(unscale(g.data(), g.size(), 65536.f));
  EXPECT_EQ(g[0], 1.f);
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    for (size_t at : {size_t{0}, size_t{500}, size_t{1000}}) {
      std::vector<float> v(1001, 1.f);
      v[at] = bad;
      EXPECT_FALSE(all_finite(v.data(), v.size())) << bad << " at " << at;
    }
  }
  EXPECT_TRUE(all_finite(nullptr, 0));
}

}  // namespace
}  // namespace volt
