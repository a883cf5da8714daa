// The instruction set oneDNN's kernels run on here, for the choices that were measured on one
// and are wrong on another (the passes ask; kernels ask oneDNN for `any` layouts themselves).
#pragma once

namespace volt {

// AVX-512 (oneDNN's avx512_core or above): 16-float vectors, and oneDNN's blocked activations
// come in blocks of 16 channels. Without it (AVX2), its blocks are of 8.
bool cpu_has_avx512();

// Whether oneDNN's int8 kernels accumulate exactly here: VNNI's u8·s8 dot products into s32 (or
// AMX tiles). Older kernels add pairs of u8·s8 products in saturating 16-bit arithmetic.
bool cpu_has_exact_int8_dot();

// Whether oneDNN has bf16 kernels here (avx512_core and above; native dot products from
// avx512_core_bf16 on). Without them it has none, and bf16 layers compute in fp32.
bool cpu_has_bf16_kernels();

// The CPU's own features, for volt's loops written with intrinsics (the library is built for
// baseline x86-64; these run only where the CPU has them):
bool cpu_has_f16c();         // F16C: float <-> half, 8 at a time (with AVX)
bool cpu_has_avx512f();      // AVX-512 F
bool cpu_has_avx512_vbmi();  // AVX-512 F, BW and VBMI (byte permutes)

}  // namespace volt
