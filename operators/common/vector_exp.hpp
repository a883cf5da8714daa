// exp(x) for float in a form the compiler vectorizes (std::exp is a library call per element):
// x = n·ln2 + r with |r| <= ln2/2, exp(r) by its Taylor polynomial to degree 7 (truncation
// error below 2^-28 on that interval, so the result is within about 2 ulp of the exact value),
// and 2^n written into the exponent bits (as 2^(n-1)·2 for positive n, so that n = 128 fits).
// Inputs below -87.3365 (ln FLT_MIN) give 0 (the result would be subnormal), above 88.72 (ln
// FLT_MAX) +inf; NaN stays NaN. Call it from a loop inside a VOLT_SIMD_CLONES function so that each
// clone inlines it at its vector width.
#pragma once
#include <bit>
#include <cstdint>
#include <limits>

namespace volt {

inline float vector_exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  // ln 2 in two parts: n·kLn2High is exact for |n| < 2^11, so r keeps its low bits.
  constexpr float kLn2High = 0.693145751953125f, kLn2Low = 1.428606765330187e-06f;
  const bool over = x > 88.72283f, under = x < -87.33654f;
  const float clamped = over ? 88.72283f : (under ? -87.33654f : x);
  // Rounded to nearest by the 1.5·2^23 trick (exact for |v| < 2^22): a library call would not
  // vectorize.
  constexpr float kRound = 12582912.0f;
  const float n = (clamped * kLog2e + kRound) - kRound;
  const float r = (clamped - n * kLn2High) - n * kLn2Low;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t e = static_cast<int32_t>(n);
  const int32_t high = e > 0;  // 2^128 has no float: 2^127·2
  const float scale = std::bit_cast<float>((e - high + 127) << 23);
  float y = p * scale * (high ? 2.0f : 1.0f);
  // Selects, not branches: the loop stays vectorizable.
  y = over ? std::numeric_limits<float>::infinity() : y;
  y = under ? 0.0f : y;
  return x != x ? x : y;
}

// The logistic function by vector_exp: within 2 ulp of 1 / (1 + e^-x); NaN stays NaN.
inline float vector_sigmoid(float x) {
  return 1.0f / (1.0f + vector_exp(-x));
}

// tanh by e^(-2|x|), and below |x| = 1/16 by its odd series to x^7 (where 1 - e^(-2|x|) would
// cancel; the next term is below 1e-11 of x): within 3 ulp; +-1 past 9; NaN stays NaN.
inline float vector_tanh(float x) {
  const float a = x < 0 ? -x : x;
  const float t = vector_exp(-2.0f * a);
  const float large = (1.0f - t) / (1.0f + t);
  const float a2 = a * a;
  const float small = a + a * a2 * (-1.0f / 3 + a2 * (2.0f / 15 + a2 * (-17.0f / 315)));
  const float y = a < 0.0625f ? small : large;
  return x < 0 ? -y : y;
}

}  // namespace volt
