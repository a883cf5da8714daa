// The shapes of a batched matrix product as numpy's matmul defines them (1-D operands promoted,
// batch axes broadcast), shared by MatMul's kernels and the integer products (MatMulInteger,
// QLinearMatMul).
#pragma once
#include <vector>

#include "operators/kernel.hpp"

namespace volt {

struct MatMulShapes {
  Shape a, b, out;  // rank-equalized operand shapes [..., M, K], [..., K, N], [..., M, N]
  Shape result;     // the ONNX output shape (1-D operands' axes dropped)
  int64_t m = 0, k = 0, n = 0;
};

// InvalidArgument naming the node when K differs or the batch axes do not broadcast.
MatMulShapes matmul_shapes(const Shape& a, const Shape& b, const Node& node);

// Which matrices of A and B each output matrix multiplies, under batch broadcasting.
class MatMulBatches {
 public:
  explicit MatMulBatches(const MatMulShapes& s);
  int64_t count() const { return count_; }
  // The matrix indices (not element offsets) of A and B for output matrix `bi`.
  void operands(int64_t bi, int64_t& a, int64_t& b) const;

 private:
  Shape batch_;
  std::vector<int64_t> sa_, sb_;
  int64_t count_;
};

}  // namespace volt
