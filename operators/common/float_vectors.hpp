// Floats as GCC vectors, for loops the compiler leaves scalar or latency-bound. Floats8: one AVX2
// register (two SSE registers in the baseline clone of a VOLT_SIMD_CLONES function, half an
// AVX-512 one): loops over a few channels at a time (a window's taps per pixel, an
// interpolation's taps). Floats16: one AVX-512 register (two AVX2 ones): sums kept in several
// vectors, so that the adds do not wait on one another.
#pragma once
#include <cstring>

namespace volt {

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"  // (never passed by value across a call: see below)
#endif
typedef float Floats8 __attribute__((vector_size(32)));
typedef float Floats16 __attribute__((vector_size(64)));
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// (By reference: a vector passed or returned by value changes the baseline clone's ABI.)
[[gnu::always_inline]] inline void load8(Floats8& v, const float* p) {
  std::memcpy(&v, p, sizeof v);
}

[[gnu::always_inline]] inline void store8(float* p, const Floats8& v) {
  std::memcpy(p, &v, sizeof v);
}

[[gnu::always_inline]] inline void load16(Floats16& v, const float* p) {
  std::memcpy(&v, p, sizeof v);
}

// *p += v, 16 floats.
[[gnu::always_inline]] inline void add_to16(float* p, const Floats16& v) {
  Floats16 y;
  load16(y, p);
  y += v;
  std::memcpy(p, &y, sizeof y);
}

// The sum of a vector's lanes.
[[gnu::always_inline]] inline float lane_sum(const Floats16& v) {
  float s = 0;
  for (int i = 0; i < 16; ++i) s += v[i];
  return s;
}

}  // namespace volt
