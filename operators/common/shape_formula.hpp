// volt.ShapeFormula: a small integer tensor (a scalar or 1-D) whose elements are polynomials in
// the dimensions of the node's inputs. fold_shape_arithmetic writes one where a model computes a
// Reshape's target, a Slice's bounds or an Expand's shape from Shape nodes (PyTorch's exports
// of `x.view(b, t, heads, d)`: Shape, Gather, Unsqueeze, Concat, ... per dimension), so that a
// plan for a new input shape evaluates one node rather than the forty a transformer layer has.
//
// Encoded as one ints attribute: the element count, then per element its term count and per term
// the coefficient, the degree and the degree's (input, axis) pairs. 2*T*B + 1 with T axis 1 and
// B axis 0 of input 0: [1,  2,  2, 2, 0, 1, 0, 0,  1, 0].
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "volt/volt.hpp"

namespace volt {

struct FormulaTerm {
  int64_t coefficient = 0;
  std::vector<std::pair<int64_t, int64_t>> factors;  // (input, axis), one per degree
};
using FormulaElement = std::vector<FormulaTerm>;  // a sum of terms

std::vector<int64_t> encode_shape_formula(const std::vector<FormulaElement>& elements);
// ErrorCode::InvalidModel (naming `what`) when `code` is not a formula over `inputs` inputs.
std::vector<FormulaElement> decode_shape_formula(std::span<const int64_t> code, size_t inputs,
                                                 const std::string& what);
// The elements at these input shapes; ErrorCode::InvalidArgument when an axis is past an input's
// rank or a value overflows int64.
std::vector<int64_t> evaluate_shape_formula(const std::vector<FormulaElement>& elements,
                                            std::span<const Shape* const> shapes,
                                            const std::string& what);

}  // namespace volt
