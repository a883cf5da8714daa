#include "operators/common/own_activation.hpp"

#include <immintrin.h>

#include "operators/common/cpu_isa.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/simd_clones.hpp"

namespace volt {
namespace {

// GCC 12's min, max, roundscale and scalef intrinsics expand to masked builtins over an
// "undefined" vector, which -Wmaybe-uninitialized reports once inlined (a false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// exp(-x) for 16 floats: -x = k·ln2 + r with |r| <= ln2/2 (ln2 in two parts, so r keeps its low
// bits), exp(r) by a polynomial fitted to relative error 1.2e-7 on that interval, times 2^k by
// scalef. -x is clamped to [-87, 88], where exp stays normal and finite; the caller handles x
// beyond.
__attribute__((target("avx512f"))) inline __m512 exp_of_negated(__m512 x) {
  const __m512 t =
      _mm512_min_ps(_mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), x), _mm512_set1_ps(-87.0f)),
                    _mm512_set1_ps(88.0f));
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(t, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693145751953125f), t);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.428606765330187e-06f), r);
  // 1 + r + r^2 (c2 + r (c3 + r (c4 + r c5))): c0 = c1 = 1 exactly, the rest fitted.
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(0.00833371002227068f), r,
                             _mm512_set1_ps(0.041898492723703384f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.1666688770055771f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.49999144673347473f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, k);
}

// x / (1 + exp(-x)) for Swish, 1 / (1 + exp(-x)) for Sigmoid. Above x = 87 the clamp gives x
// and 1 exactly; below x = -88 both are x·0 and 0 (the exact values are below 6e-37 there, the
// sigmoid's below the smallest normal float); a NaN x stays NaN.
template <bool kSwish>
__attribute__((target("avx512f"))) inline __m512 gate(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  __m512 y = _mm512_div_ps(kSwish ? x : one, _mm512_add_ps(one, exp_of_negated(x)));
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, _mm512_set1_ps(-88.0f), _CMP_LT_OQ),
                         kSwish ? _mm512_mul_ps(x, zero) : zero);
  return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

template <bool kSwish>
__attribute__((target("avx512f"))) void gate_in_place(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, gate<kSwish>(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(x + i, tail, gate<kSwish>(_mm512_maskz_loadu_ps(tail, x + i)));
  }
}

#pragma GCC diagnostic pop

}  // namespace

bool has_own_activation(const FusedActivation& act) {
  using K = FusedActivation::Kind;
  return (act.kind == K::Swish || act.kind == K::Sigmoid) && cpu_has_avx512f();
}

void apply_own_activation(const FusedActivation& act, float* x, int64_t n) {
  VOLT_CHECK(has_own_activation(act), Runtime, "apply_own_activation: not available here");
  if (act.kind == FusedActivation::Kind::Swish)
    gate_in_place<true>(x, n);
  else
    gate_in_place<false>(x, n);
}

namespace {
// exp_activation at the clones' widths.
VOLT_SIMD_CLONES void exp_activation_cloned(FusedActivation::Kind kind, float* x, int64_t n) {
  exp_activation(kind, x, n);
}
}  // namespace

void apply_activation(const FusedActivation& act, float* x, int64_t n) {
  if (!act.any()) return;
  if (has_own_activation(act)) return apply_own_activation(act, x, n);
  if (takes_exp(act.kind)) return exp_activation_cloned(act.kind, x, n);
  for (int64_t i = 0; i < n; ++i) x[i] = act.apply(x[i]);
}

void apply_own_activation_in_parallel(const FusedActivation& act, float* x, int64_t n) {
  parallel_chunks(n, 16384,
                  [&](int64_t lo, int64_t hi) { apply_own_activation(act, x + lo, hi - lo); });
}

}  // namespace volt
