// Activations volt applies to a buffer itself, where oneDNN's post-op costs more than a pass of
// ours over data still in cache. oneDNN's swish and logistic post-ops ran at 0.41-0.56 ns an
// element on one Zen 4 thread inside its depthwise convolution (brdgmm_dw, 14x14x672 5x5: 76 us
// without, 150 with swish; 56x56x144 3x3: 115 -> 302), more than the convolution itself; this
// loop takes 0.21 ns (exp by a degree-5 polynomial and AVX-512's scalef, one division), so a
// convolution without the post-op and this pass over its output rows while they sit in L2 cost
// less than the two fused. Kernels ask has_own_activation when they choose their primitives,
// then call apply_own_activation on what those wrote.
#pragma once
#include <cstdint>

#include "operators/common/fused_activation.hpp"
#include "operators/common/vector_exp.hpp"

namespace volt {

// Whether apply_own_activation takes `act` on this CPU (Swish and Sigmoid with AVX-512F).
bool has_own_activation(const FusedActivation& act);

// `act` applied to x[0, n) in place on the calling thread. For Swish and Sigmoid within 1e-6
// relative of the exact function, or 1e-36 absolute where it is that small (the exp polynomial's
// error is 1.2e-7, the roundings of its evaluation and of the division add to it); NaN stays
// NaN.
void apply_own_activation(const FusedActivation& act, float* x, int64_t n);

// Whether `kind` is one exp_activation computes: Tanh, Sigmoid, Swish.
inline bool takes_exp(FusedActivation::Kind kind) {
  using K = FusedActivation::Kind;
  return kind == K::Tanh || kind == K::Sigmoid || kind == K::Swish;
}

// Tanh, Sigmoid or Swish (takes_exp) over x[0, n) in place by vector_exp, within 1e-7 absolute
// of the exact function. Inline, so that a loop compiled for wider vectors (a VOLT_SIMD_CLONES
// clone, Winograd's AVX-512 kernel over one vector of lanes) has it at its width.
inline void exp_activation(FusedActivation::Kind kind, float* x, int64_t n) {
  using K = FusedActivation::Kind;
  if (kind == K::Tanh) {
    for (int64_t i = 0; i < n; ++i) x[i] = vector_tanh(x[i]);
  } else if (kind == K::Sigmoid) {
    for (int64_t i = 0; i < n; ++i) x[i] = vector_sigmoid(x[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] * vector_sigmoid(x[i]);
  }
}

// Any fused activation over x[0, n) in place on the calling thread, for volt's own loops: the own
// kernel above where it applies, Tanh, Sigmoid and Swish in lanes by vector_exp (within 1e-7
// absolute of the exact function), the others by FusedActivation::apply. A ConvTranspose's Tanh
// (a GAN generator's last layer) ran std::tanh an element at a time.
void apply_activation(const FusedActivation& act, float* x, int64_t n);

// The same over the session's threads, for a kernel whose primitive ran over all of them.
void apply_own_activation_in_parallel(const FusedActivation& act, float* x, int64_t n);

}  // namespace volt
