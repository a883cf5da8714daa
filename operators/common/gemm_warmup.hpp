// oneDNN generates the code of its f32 gemm — the kernels behind every matmul with run-time
// dimensions, which is what shape-generic plans use (cpu/matmul.cpp) — on its first use in the
// process: 40-70 ms and about 7 MiB on this project's AVX-512 machine, paid by the first run at
// a model's second input shape (a text classifier's stream of 200 sentence lengths: 70 of its
// 436 ms). A session whose model will likely see several shapes starts that generation on a
// thread of its own while it loads, so that the first new shape finds the code made.
#pragma once
#include <thread>

namespace volt {

// Starts generating oneDNN's f32 gemm code on a new single-threaded thread, once per process:
// the thread returned (it joins when destroyed), or an empty one where an earlier call started
// it. Failures are swallowed: the first real product then generates the code itself.
std::jthread start_gemm_warmup();

}  // namespace volt
