// Softmax (or, with `log`, LogSoftmax) of each of `rows` contiguous rows of n floats (x may be
// y), vectorized, one clone per ISA chosen at load: Softmax's kernel over the innermost axis, and
// ai.volt Attention's over each block of query rows' scores.
#pragma once
#include <cstdint>

namespace volt {

void softmax_rows_f32(const float* x, float* y, int64_t rows, int64_t n, bool log);

// The same without the last pass: each of `rows` rows of n floats (`ld` apart) becomes
// e^(x - its maximum), in place, and inv_sums[r] one over row r's sum; the caller scales what it
// computes from a row (Attention: the row's weighting of V, dv floats rather than the row's n).
void exp_rows_f32(float* x, int64_t rows, int64_t n, int64_t ld, float* inv_sums);

}  // namespace volt
