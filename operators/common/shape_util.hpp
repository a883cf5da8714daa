// Shape arithmetic shared by kernels: axis normalization, broadcasting, strides.
#pragma once
#include <algorithm>
#include <vector>

#include "operators/common/parallel.hpp"
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
// Adjacent axes that every operand reads contiguously (or every operand broadcasts) are merged
// first, so the innermost row is as long as the layouts allow and the walk's bookkeeping is per
// row, not per element.
class BroadcastIterator {
 public:
  BroadcastIterator(const Shape& out, std::vector<std::vector<int64_t>> operand_strides);
  // f(offsets, n, steps) for each innermost row, in order: the row's n elements are at
  // offsets[j] + i * steps[j] in operand j, i in [0, n).
  template <class F>
  void for_each_row(F&& f) const {
    if (total_ == 0) return;
    const size_t rank = shape_.size(), k = strides_.size();
    std::vector<int64_t> steps(k, 0);
    if (rank == 0) {  // one element
      const std::vector<int64_t> off(k, 0);
      f(static_cast<const int64_t*>(off.data()), int64_t{1},
        static_cast<const int64_t*>(steps.data()));
      return;
    }
    const int64_t n = shape_[rank - 1];
    for (size_t j = 0; j < k; ++j) steps[j] = strides_[j][rank - 1];
    std::vector<int64_t> idx(rank, 0), off(k, 0);
    for (int64_t done = 0; done < total_; done += n) {
      f(static_cast<const int64_t*>(off.data()), n, static_cast<const int64_t*>(steps.data()));
      next_row(idx, off);
    }
  }
  // f(offsets, n, steps, first) for pieces of the innermost rows as for_each_row gives them,
  // `first` the piece's first element in the output's order, split among the session's threads:
  // rows shorter than `grain` elements in chunks of rows, longer ones in pieces of `grain`
  // (f must only write its own piece).
  template <class F>
  void for_each_row_parallel(F&& f, int64_t grain = 32768) const {
    if (total_ == 0) return;
    const size_t rank = shape_.size(), k = strides_.size();
    const int64_t n = rank == 0 ? 1 : shape_[rank - 1], rows = total_ / n;
    std::vector<int64_t> steps(k, 0);
    if (rank > 0)
      for (size_t j = 0; j < k; ++j) steps[j] = strides_[j][rank - 1];
    // The operands' offsets at the start of row `row`.
    auto row_start = [&](int64_t row, std::vector<int64_t>& idx, std::vector<int64_t>& off) {
      idx.assign(rank, 0);
      off.assign(k, 0);
      for (size_t d = rank > 0 ? rank - 1 : 0; d-- > 0;) {
        idx[d] = row % shape_[d];
        row /= shape_[d];
        for (size_t j = 0; j < k; ++j) off[j] += idx[d] * strides_[j][d];
      }
    };
    if (n >= grain) {
      const int64_t pieces = (n + grain - 1) / grain;
      parallel_for(rows * pieces, rows * pieces > 1, [&](int64_t item) {
        std::vector<int64_t> idx, off;
        row_start(item / pieces, idx, off);
        const int64_t lo = item % pieces * grain, len = std::min(grain, n - lo);
        for (size_t j = 0; j < k; ++j) off[j] += lo * steps[j];
        f(static_cast<const int64_t*>(off.data()), len, static_cast<const int64_t*>(steps.data()),
          item / pieces * n + lo);
      });
      return;
    }
    parallel_chunks(rows, std::max<int64_t>(1, grain / n), [&](int64_t lo, int64_t hi) {
      std::vector<int64_t> idx, off;
      row_start(lo, idx, off);
      for (int64_t row = lo; row < hi; ++row) {
        f(static_cast<const int64_t*>(off.data()), n, static_cast<const int64_t*>(steps.data()),
          row * n);
        next_row(idx, off);
      }
    });
  }
  // f(offsets) for every element, in order.
  template <class F>
  void for_each(F&& f) const {
    std::vector<int64_t> at(strides_.size());
    for_each_row([&](const int64_t* off, int64_t n, const int64_t* steps) {
      for (size_t j = 0; j < at.size(); ++j) at[j] = off[j];
      for (int64_t i = 0; i < n; ++i) {
        f(static_cast<const int64_t*>(at.data()));
        for (size_t j = 0; j < at.size(); ++j) at[j] += steps[j];
      }
    });
  }

 private:
  // From one innermost row's multi-index (all axes but the last) and operand offsets to the
  // next row's.
  void next_row(std::vector<int64_t>& idx, std::vector<int64_t>& off) const {
    const size_t rank = shape_.size(), k = strides_.size();
    for (size_t d = rank > 0 ? rank - 1 : 0; d-- > 0;) {
      ++idx[d];
      for (size_t j = 0; j < k; ++j) off[j] += strides_[j][d];
      if (idx[d] < shape_[d]) break;
      for (size_t j = 0; j < k; ++j) off[j] -= strides_[j][d] * shape_[d];
      idx[d] = 0;
    }
  }

  Shape shape_;                                // merged axes
  std::vector<std::vector<int64_t>> strides_;  // per operand, per merged axis
  int64_t total_;
};

// Reads an integer tensor (int32 or int64) as int64 values.
std::vector<int64_t> to_int64_vector(const Tensor& t, const Node& node, const char* what);

// Reshape's output shape for input shape `in` and `target` (0 copies the input's dimension
// unless `allowzero`, one -1 takes what is left); InvalidArgument, naming `node`, when the
// element counts differ.
Shape resolve_reshape(const Shape& in, const std::vector<int64_t>& target, bool allowzero,
                      const Node& node);

}  // namespace volt
