// oneDNN generates the code of its f32 gemm — the kernels behind every matmul with run-time
// dimensions, which is what shape-generic plans use (cpu/matmul.cpp) — on its first use in the
// process: 40-70 ms and about 7 MiB on this project's AVX-512 machine, 17-30 ms on an AVX2
// EPYC, paid by the first run that multiplies with it. With AVX-512 that is the first run at a
// model's second input shape where the first plan's products took other kernels (the CRNN
// recognizer's second width; a text classifier, whose attention multiplies activations, pays it
// in its first run anyway); without, the first run of every model with a product on it (until
// products with constant weights ran as convolutions there, the LeNet-style CNN's 64x16x10
// classifier: 27 ms of a 30 ms first run). A session whose model will need the
// code starts that generation on a thread of its own as soon as its file parses, and joins it
// when the load is done, so that the first product finds the code made.
#pragma once
#include <thread>

namespace volt {

// Starts generating oneDNN's f32 gemm code on a new single-threaded thread, once per process:
// the thread returned (it joins when destroyed), or an empty one where an earlier call started
// it. Failures are swallowed: the first real product then generates the code itself.
std::jthread start_gemm_warmup();

// Whether a model's f32 products may run on that gemm: on a CPU without AVX-512 (oneDNN's matmul
// has no other kernel there; those with constant weights run as convolutions), and in the plans
// after the first where runs come in several shapes (`shapes_vary`).
bool products_need_gemm_code(bool shapes_vary);

}  // namespace volt
