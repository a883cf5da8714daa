// Internal CSR helpers shared by CsrTensor::to_dense and the Densify kernel.
#pragma once
#include "volt/volt.hpp"

namespace volt {
// Writes the dense form of `a` into `dense` (already [rows, cols] of a's dtype): zeros, then
// every non-zero added at its place (duplicates sum).
void csr_scatter_into(const CsrTensor& a, Tensor& dense);
}  // namespace volt
