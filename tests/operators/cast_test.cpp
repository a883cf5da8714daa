// Cast between float32 and float16, which runs on the CPU's F16C instructions where it has them,
// agrees bit for bit with Float16's own round-to-nearest-even conversion: every half value up,
// and down a set of floats around every rounding case (ties, subnormals, overflow, infinities).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "model_builder.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

Tensor cast(const Tensor& x, int to) {
  ModelBuilder b(13);
  b.input_any("x", x.dtype() == DType::Float ? 1 : 10).output_any("y", to);
  b.node("Cast", {"x"}, {"y"}, [&](auto& n) { ModelBuilder::set_int(n, "to", to); });
  const std::string bytes = b.bytes();
  Session s = Session::from_bytes(bytes.data(), bytes.size());
  return s.run({{"x", x}})[0].tensor();
}

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

TEST(Cast, EveryHalfBecomesTheFloatFloat16Gives) {
  Tensor h = Tensor::empty(DType::Float16, {65536 + 3});  // (+3: a tail after whole vectors)
  auto* bits = static_cast<uint16_t*>(h.raw());
  for (int64_t i = 0; i < h.numel(); ++i) bits[i] = static_cast<uint16_t>(i & 0xffff);
  const Tensor f = cast(h, 1);
  for (int64_t i = 0; i < h.numel(); ++i) {
    const float want = static_cast<float>(Float16::from_bits(bits[i]));
    const float got = f.data<float>()[i];
    if (std::isnan(want))
      EXPECT_TRUE(std::isnan(got)) << "half bits " << bits[i];
    else
      ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << "half bits " << bits[i] << ": " << got;
  }
}

TEST(Cast, FloatsRoundToTheHalfFloat16Gives) {
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               65504.0f,
                               65519.99f,
                               65520.0f,
                               1e9f,
                               -1e9f,
                               5.96e-8f,
                               2.98e-8f,
                               2.99e-8f,
                               1e-10f,
                               6.1e-5f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN()};
  // Every half's neighbourhood: the half itself, the ties half-way to the next, and a float
  // either side of each tie.
  for (uint32_t h = 0; h < 0x7c00; h += 7) {
    const float lo = static_cast<float>(Float16::from_bits(static_cast<uint16_t>(h)));
    const float hi = static_cast<float>(Float16::from_bits(static_cast<uint16_t>(h + 1)));
    const float tie = lo + (hi - lo) / 2;
    uint32_t t;
    std::memcpy(&t, &tie, 4);
    for (float v : {lo, tie, from_bits(t - 1), from_bits(t + 1)}) {
      values.push_back(v);
      values.push_back(-v);
    }
  }
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-70000.0f, 70000.0f);
  for (int i = 0; i < 1001; ++i) values.push_back(u(rng));
  const Tensor y = cast(Tensor::from<float>(values, {static_cast<int64_t>(values.size())}), 10);
  const auto* bits = static_cast<const uint16_t*>(y.raw());
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) {
      EXPECT_TRUE(std::isnan(static_cast<float>(Float16::from_bits(bits[i]))));
      continue;
    }
    ASSERT_EQ(bits[i], Float16(values[i]).bits) << "float " << values[i];
  }
}

}  // namespace
}  // namespace volt
