#include "operators/common/matmul_shapes.hpp"

#include "operators/common/shape_util.hpp"

namespace volt {

MatMulShapes matmul_shapes(Shape a, Shape b, const Node& node) {
  VOLT_CHECK(!a.empty() && !b.empty(), InvalidArgument,
             node.describe() + ": MatMul operands must have rank >= 1");
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), 1);
  if (b_vec) b.push_back(1);
  VOLT_CHECK(a.back() == b[b.size() - 2], InvalidArgument,
             node.describe() + ": shapes " + shape_str(a) + " and " + shape_str(b) +
                 " do not multiply (K differs)");
  MatMulShapes s;
  s.m = a[a.size() - 2];
  s.k = a.back();
  s.n = b.back();
  const Shape batch =
      broadcast_shapes({Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2)}, node);
  while (a.size() < batch.size() + 2) a.insert(a.begin(), 1);
  while (b.size() < batch.size() + 2) b.insert(b.begin(), 1);
  s.a = a;
  s.b = b;
  s.out = batch;
  s.out.push_back(s.m);
  s.out.push_back(s.n);
  s.result = batch;
  if (!a_vec) s.result.push_back(s.m);
  if (!b_vec) s.result.push_back(s.n);
  return s;
}

MatMulBatches::MatMulBatches(const MatMulShapes& s)
    : batch_(s.out.begin(), s.out.end() - 2),
      sa_(broadcast_strides(Shape(s.a.begin(), s.a.end() - 2), batch_)),
      sb_(broadcast_strides(Shape(s.b.begin(), s.b.end() - 2), batch_)),
      count_(numel_of(batch_)) {}

void MatMulBatches::operands(int64_t bi, int64_t& a, int64_t& b) const {
  a = b = 0;
  for (size_t d = batch_.size(); d-- > 0;) {
    a += (bi % batch_[d]) * sa_[d];
    b += (bi % batch_[d]) * sb_[d];
    bi /= batch_[d];
  }
}

}  // namespace volt
