// The instruction set oneDNN's kernels run on here, for the choices that were measured on one
// and are wrong on another (the passes ask; kernels ask oneDNN for `any` layouts themselves).
#pragma once

namespace volt {

// AVX-512 (oneDNN's avx512_core or above): 16-float vectors, and oneDNN's blocked activations
// come in blocks of 16 channels. Without it (AVX2), its blocks are of 8.
bool cpu_has_avx512();

}  // namespace volt
