// Shape arithmetic shared by kernels: axis normalization, broadcasting, strides.
#pragma once
#include <vector>

#include "operators/kernel.hpp"

namespace volt {

// Normalizes a possibly negative axis into [0, rank) (or [0, rank] when `inclusive`).
int64_t normalize_axis(int64_t axis, int64_t rank, const Node& node, bool inclusive = false);

// The numpy-style broadcast of two or more shapes; an InvalidArgument error naming the node
// when they do not broadcast.
Shape broadcast_shapes(const std::vector<Shape>& shapes, const Node& node);

// Row-major strides of a shape, in elements.
std::vector<int64_t> strides_of(const Shape& shape);

// For each output element of `out`, the element index in an input of shape `in` broadcast to
// `out`: strides of `in` aligned to the right of `out`, zero where `in` has size 1.
std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out);

// Walks the multi-index of `shape` in row-major order, keeping one running offset per operand.
class BroadcastIterator {
 public:
  BroadcastIterator(const Shape& out, std::vector<std::vector<int64_t>> operand_strides);
  // Calls f(offsets...) style: f(const int64_t* offsets) for every element, in order.
  template <class F>
  void for_each(F&& f) {
    const size_t rank = shape_.size();
    const size_t k = strides_.size();
    std::vector<int64_t> idx(rank, 0), off(k, 0);
    const int64_t total = numel_of(shape_);
    for (int64_t e = 0; e < total; ++e) {
      f(off.data());
      for (size_t d = rank; d-- > 0;) {
        ++idx[d];
        for (size_t j = 0; j < k; ++j) off[j] += strides_[j][d];
        if (idx[d] < shape_[d]) break;
        for (size_t j = 0; j < k; ++j) off[j] -= strides_[j][d] * shape_[d];
        idx[d] = 0;
      }
    }
  }

 private:
  Shape shape_;
  std::vector<std::vector<int64_t>> strides_;
};

// Reads an integer tensor (int32 or int64) as int64 values.
std::vector<int64_t> to_int64_vector(const Tensor& t, const Node& node, const char* what);

}  // namespace volt
