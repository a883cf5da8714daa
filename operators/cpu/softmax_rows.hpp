// Softmax (or, with `log`, LogSoftmax) of each of `rows` contiguous rows of n floats (x may be
// y), vectorized, one clone per ISA chosen at load: Softmax's kernel over the innermost axis, and
// ai.volt Attention's over each block of query rows' scores.
#pragma once
#include <cstdint>

namespace volt {

void softmax_rows_f32(const float* x, float* y, int64_t rows, int64_t n, bool log);

}  // namespace volt
