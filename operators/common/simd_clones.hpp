// VOLT_SIMD_CLONES: compile a hot loop for AVX-512, AVX2 and the portable baseline, chosen at run
// time (GCC function multiversioning). The library itself is built for the baseline x86-64, so
// that one binary runs on any machine; the loops that bound training and sparse work get the
// wide registers this way.
//
// Mark plain (non-template) functions and keep OpenMP regions outside them: an outlined parallel
// body is a separate function and would not be cloned. Templates called from a clone are
// inlined into it and so compiled for its target.
#pragma once

// The clones are chosen by an ifunc resolver while the library is being relocated, before any
// sanitizer runtime is ready: sanitized builds compile the portable version only.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define VOLT_SIMD_CLONES
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define VOLT_SIMD_CLONES
#endif
#endif
#ifndef VOLT_SIMD_CLONES
#define VOLT_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
