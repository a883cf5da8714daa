// erf(x) for float in a form the compiler vectorizes (std::erf is a library call per element).
// |x| < 0.5: its Maclaurin series to x^13 (truncation below 1e-9 relative there). Beyond:
// Abramowitz and Stegun 7.1.26, 1 - t·P(t)·exp(-x²) with t = 1 / (1 + 0.3275911·|x|), absolute
// error below 1.5e-7, which from erf(0.5) = 0.52 on is below 3e-7 relative; with float rounding
// 5.3e-7 at worst against std::erf in double over [-6, 6] (tests/operators/erf_test.cpp); exp by
// vector_exp. Odd in x; ±1 beyond |x| = 4 (erf(4) = 1 - 1.5e-8); NaN stays NaN. Call it from a
// loop inside a VOLT_SIMD_CLONES function, as vector_exp.
#pragma once
#include "operators/common/vector_exp.hpp"

namespace volt {

inline float vector_erf(float x) {
  const float a = x < 0 ? -x : x;
  // Near 0: (2/sqrt(pi)) x (1 - x²/3 + x⁴/10 - x⁶/42 + x⁸/216 - x¹⁰/1320 + x¹²/9360).
  const float z = a * a;
  float s = 1.0f / 9360;
  s = s * -z + 1.0f / 1320;
  s = s * -z + 1.0f / 216;
  s = s * -z + 1.0f / 42;
  s = s * -z + 1.0f / 10;
  s = s * -z + 1.0f / 3;
  s = s * -z + 1.0f;
  const float near = 1.12837916709551257f * a * s;
  // Farther: 1 - (a1 t + a2 t² + a3 t³ + a4 t⁴ + a5 t⁵) e^(-x²).
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float far = 1.0f - p * t * vector_exp(-z);
  const float r = a < 0.5f ? near : (a > 4.0f ? 1.0f : far);
  // x's sign on r (>= 0), -0 included.
  const float signed_r =
      std::bit_cast<float>(std::bit_cast<uint32_t>(r) | (std::bit_cast<uint32_t>(x) & 0x80000000u));
  return x != x ? x : signed_r;
}

}  // namespace volt
