// Eight floats as one GCC vector: one AVX2 register (two SSE registers in the baseline clone of
// a VOLT_SIMD_CLONES function, half an AVX-512 one). Loops over a few channels at a time that the
// compiler left scalar (a window's taps per pixel, an interpolation's taps) vectorize with it.
#pragma once
#include <cstring>

namespace volt {

typedef float Floats8 __attribute__((vector_size(32)));

// (By reference: a vector passed or returned by value changes the baseline clone's ABI.)
[[gnu::always_inline]] inline void load8(Floats8& v, const float* p) {
  std::memcpy(&v, p, sizeof v);
}

[[gnu::always_inline]] inline void store8(float* p, const Floats8& v) {
  std::memcpy(p, &v, sizeof v);
}

}  // namespace volt
