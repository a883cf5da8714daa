#include "operators/common/matmul_shapes.hpp"

#include "operators/common/shape_util.hpp"

#include <algorithm>

namespace volt {

MatMulShapes matmul_shapes(const Shape& a0, const Shape& b0, const Node& node) {
  VOLT_CHECK(!a0.empty() && !b0.empty(), InvalidArgument,
             node.describe() + ": MatMul operands must have rank >= 1");
  // (Built in place, four shapes and no temporaries: every new input shape plans each product.)
  const bool a_vec = a0.size() == 1, b_vec = b0.size() == 1;
  const size_t a_batch = a_vec ? 0 : a0.size() - 2, b_batch = b_vec ? 0 : b0.size() - 2;
  const size_t batch = std::max(a_batch, b_batch);
  MatMulShapes s;
  s.m = a_vec ? 1 : a0[a0.size() - 2];
  s.k = a0.back();
  s.n = b_vec ? 1 : b0.back();
  const int64_t b_k = b_vec ? b0[0] : b0[b0.size() - 2];
  VOLT_CHECK(s.k == b_k, InvalidArgument,
             node.describe() + ": shapes " + shape_str(a0) + " and " + shape_str(b0) +
                 " do not multiply (K differs)");
  s.a.assign(batch + 2, 1);
  s.b.assign(batch + 2, 1);
  s.out.assign(batch + 2, 1);
  std::copy(a0.begin(), a0.begin() + static_cast<long>(a_batch),
            s.a.begin() + static_cast<long>(batch - a_batch));
  std::copy(b0.begin(), b0.begin() + static_cast<long>(b_batch),
            s.b.begin() + static_cast<long>(batch - b_batch));
  for (size_t i = 0; i < batch; ++i) {
    const int64_t x = s.a[i], y = s.b[i];
    if (x != y && x != 1 && y != 1)
      broadcast_shapes({Shape(a0.begin(), a0.begin() + static_cast<long>(a_batch)),
                        Shape(b0.begin(), b0.begin() + static_cast<long>(b_batch))},
                       node);  // (throws, naming both)
    s.out[i] = x == 1 ? y : x;
  }
  s.a[batch] = s.m;
  s.a[batch + 1] = s.k;
  s.b[batch] = s.k;
  s.b[batch + 1] = s.n;
  s.out[batch] = s.m;
  s.out[batch + 1] = s.n;
  s.result.reserve(batch + 2);
  s.result.assign(s.out.begin(), s.out.begin() + static_cast<long>(batch));
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
