// log and log1p of floats in forms the compiler vectorizes (std::log is a library call per
// element; oneDNN's eltwise log is off by up to 2.7e-5 relative, ~200 ulp, which moved a T5
// relative-position bucket across an integer: 13% off ONNX Runtime's output). x = m·2^e with m
// in [√½, √2), log m = 2·atanh(s) with s = (m − 1)/(m + 1), |s| <= 0.172, by its series to s^11
// (the next term is below 2^-32 of the sum): within 2 ulp. log(0) = -inf, log(+inf) = +inf,
// negative x and NaN give NaN; subnormals are scaled into range first. log1p(t) as
// log(u)·t/(u − 1) with u = 1 + t (Goldberg's correction for the rounding of u), t where u
// rounds to 1. Call them from a loop inside a VOLT_SIMD_CLONES function.
#pragma once
#include <bit>
#include <cstdint>
#include <limits>

namespace volt {

inline float vector_log(float x) {
  constexpr float kLn2High = 0.693145751953125f, kLn2Low = 1.428606765330187e-06f;
  constexpr float kMinNormal = 1.17549435e-38f, kTwo23 = 8388608.0f;
  const bool subnormal = x < kMinNormal;
  const float scaled = subnormal ? x * kTwo23 : x;
  const int32_t bits = std::bit_cast<int32_t>(scaled);
  int32_t e = ((bits >> 23) & 0xff) - 127 - (subnormal ? 23 : 0);
  float m = std::bit_cast<float>((bits & 0x007fffff) | 0x3f800000);  // [1, 2)
  const bool high = m > 1.41421356f;
  m = high ? m * 0.5f : m;
  e += high ? 1 : 0;
  const float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
  float p = 1.0f / 11;
  p = p * s2 + 1.0f / 9;
  p = p * s2 + 1.0f / 7;
  p = p * s2 + 1.0f / 5;
  p = p * s2 + 1.0f / 3;
  const float log_m = 2.0f * s + 2.0f * s * s2 * p;
  const float fe = static_cast<float>(e);
  float y = fe * kLn2High + (log_m + fe * kLn2Low);
  // Selects, not branches: the loop stays vectorizable.
  y = x == std::numeric_limits<float>::infinity() ? x : y;
  y = x == 0.0f ? -std::numeric_limits<float>::infinity() : y;
  y = x < 0.0f ? std::numeric_limits<float>::quiet_NaN() : y;
  return x != x ? x : y;
}

inline float vector_log1p(float t) {
  const float u = 1.0f + t;
  const float d = u - 1.0f;
  const float y = d == 0.0f ? t : vector_log(u) * (t / d);
  return u == std::numeric_limits<float>::infinity() ? u : y;
}

}  // namespace volt
