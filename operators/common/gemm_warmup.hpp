// oneDNN generates the code of its f32 gemm — the kernels behind every matmul with run-time
// dimensions, which is what shape-generic plans use (cpu/matmul.cpp) — on its first use in the
// process: 40-70 ms and about 7 MiB on this project's AVX-512 machine, paid by the first run
// that multiplies with it: the first run at a model's second input shape where the first plan's
// products took other kernels (the CRNN recognizer's second width; a text classifier, whose
// attention multiplies activations, pays it in its first run anyway). A session whose model
// will likely see several shapes starts that generation on a thread of its own while it loads,
// so that the first product finds the code made, or waits only for what is left of it.
#pragma once
#include <thread>

namespace volt {

// Starts generating oneDNN's f32 gemm code on a new single-threaded thread, once per process:
// the thread returned (it joins when destroyed), or an empty one where an earlier call started
// it. Failures are swallowed: the first real product then generates the code itself.
std::jthread start_gemm_warmup();

}  // namespace volt
