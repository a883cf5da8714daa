// The unary functions whose derivative volt's EltwiseGrad kernels compute (dx = dy * f'(x, y)
// for y = f(x)), shared by the CPU and CUDA kernels. Plain enough for nvcc to include.
#pragma once
#include <cstdint>

namespace volt {

struct Node;

enum class GradFn : uint8_t {
  Relu,
  LeakyRelu,
  Elu,
  Sigmoid,
  Tanh,
  Exp,
  Log,
  Sqrt,
  Reciprocal,
  Erf,
  Softplus,
  Abs,
  Sin,
  Cos,
  Clip,
  Gelu,
  GeluTanh,
  HardSigmoid,
  HardSwish,
  Celu,
  Softsign,
  ThresholdedRelu,
  Shrink,
  Tan,
  Asin,
  Acos,
  Atan,
  Sinh,
  Cosh,
  Asinh,
  Acosh,
  Atanh
};

// From an EltwiseGrad node's `fn` (and Gelu's `approximate`); InvalidModel when unknown.
GradFn grad_fn_of(const Node& n);
// The node's `alpha`: LeakyRelu's slope (default 0.01), HardSigmoid's (0.2), Shrink's lambd
// (0.5), Elu's, Celu's and ThresholdedRelu's alpha (1).
float grad_fn_alpha(const Node& n, GradFn f);

}  // namespace volt
