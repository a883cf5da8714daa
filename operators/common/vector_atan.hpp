// atan(x) for float in a form the compiler vectorizes (std::atan is a library call per element:
// 4.3 ms on [8, 128, 768] against ONNX Runtime's 2.3). |x| > 1 folds to pi/2 - atan(1/|x|),
// then t > tan(pi/8) to pi/4 + atan((t - 1) / (t + 1)), leaving u in [-tan(pi/8), tan(pi/8)]
// where atan(u) = u + u·z·P(z), z = u², P of degree 3 fitted (numpy, least squares reweighted
// toward the worst error) to 2.2e-8 relative; with float rounding within 2e-7 relative of
// std::atan in double (tests/operators/vector_math_test.cpp). Odd in x, ±pi/2 at ±inf, NaN stays
// NaN. Call it from a loop inside a VOLT_SIMD_CLONES function, as vector_exp.
#pragma once
#include <bit>
#include <cstdint>

namespace volt {

inline float vector_atan(float x) {
  constexpr float kHalfPi = 1.57079632679489662f, kQuarterPi = 0.785398163397448310f;
  constexpr float kTanEighthPi = 0.414213562373095049f;
  const float a = x < 0 ? -x : x;
  const bool inverted = a > 1.0f;
  const float t = inverted ? 1.0f / a : a;
  const bool shifted = t > kTanEighthPi;
  const float u = shifted ? (t - 1.0f) / (t + 1.0f) : t;
  const float z = u * u;
  float p = 0.08060311526060104f;
  p = p * z - 0.13879850506782532f;
  p = p * z + 0.19977925717830658f;
  p = p * z - 0.33332955837249756f;
  float r = u + u * z * p;
  r = shifted ? kQuarterPi + r : r;
  r = inverted ? kHalfPi - r : r;
  // x's sign on r (>= 0), -0 included.
  const float signed_r =
      std::bit_cast<float>(std::bit_cast<uint32_t>(r) | (std::bit_cast<uint32_t>(x) & 0x80000000u));
  return x != x ? x : signed_r;
}

}  // namespace volt
