// QuantizeLinear's arithmetic on 16 floats in AVX-512 registers, and a 256-entry byte table on 64
// bytes in AVX-512 VBMI, for the int8 element-wise kernels (quantization.cpp,
// quantized_elementwise.cpp). The library is built for baseline x86-64: callers check the CPU
// at run time (cpu_has_avx512f(), cpu_has_avx512_vbmi() in operators/common/cpu_isa.hpp) and
// call these only from functions compiled for that target.
#pragma once
#include <immintrin.h>

#include <array>
#include <cstdint>

namespace volt::avx512 {

struct QuantizeConstants {
  __m512 scale, zero_point, lo, hi, big, neg_big;
};

__attribute__((target("avx512f"))) inline QuantizeConstants quantize_constants(float scale,
                                                                               int32_t zero_point,
                                                                               bool to_signed) {
  return {_mm512_set1_ps(scale),
          _mm512_set1_ps(static_cast<float>(zero_point)),
          _mm512_set1_ps(to_signed ? -128.0f : 0.0f),
          _mm512_set1_ps(to_signed ? 127.0f : 255.0f),
          _mm512_set1_ps(1024.0f),
          _mm512_set1_ps(-1024.0f)};
}

// quantize_value (quantization.hpp) on 16 lanes, to the bit: v / scale in float, clamped to
// ±1024 (beyond saturates anyway), rounded to nearest even (vrndscaleps), plus the zero point,
// saturated; NaN lanes 0. The 16 results as bytes (int8 as its bits).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's masked min/max builtins
__attribute__((target("avx512f"))) inline __m128i quantize16(__m512 v, const QuantizeConstants& c) {
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  __m512 q = _mm512_div_ps(v, c.scale);
  q = _mm512_min_ps(_mm512_max_ps(q, c.neg_big), c.big);
  q = _mm512_add_ps(_mm512_roundscale_ps(q, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                    c.zero_point);
  q = _mm512_min_ps(_mm512_max_ps(q, c.lo), c.hi);
  q = _mm512_mask_mov_ps(q, nan, _mm512_setzero_ps());
  return _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(q));  // in range: plain truncation
}
#pragma GCC diagnostic pop

// A 256-entry byte table in four registers; look_up64 maps 64 bytes through it at once.
struct ByteTable {
  __m512i part[4];
};

__attribute__((target("avx512f"))) inline ByteTable load_table(
    const std::array<uint8_t, 256>& table) {
  ByteTable t;
  for (int k = 0; k < 4; ++k) t.part[k] = _mm512_loadu_si512(table.data() + 64 * k);
  return t;
}

// y[i] = table[x[i]]: each half of the table by one two-register permute on the low 7 bits,
// the high bit choosing between them.
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) inline __m512i look_up64(
    __m512i x, const ByteTable& t) {
  const __m512i low = _mm512_permutex2var_epi8(t.part[0], x, t.part[1]);
  const __m512i high = _mm512_permutex2var_epi8(t.part[2], x, t.part[3]);
  return _mm512_mask_blend_epi8(_mm512_movepi8_mask(x), low, high);
}

}  // namespace volt::avx512
