#include "operators/common/shape_util.hpp"

#include <limits>

namespace volt {

int64_t normalize_axis(int64_t axis, int64_t rank, const Node& node, bool inclusive) {
  const int64_t hi = inclusive ? rank + 1 : rank;
  const int64_t a = axis < 0 ? axis + rank : axis;
  VOLT_CHECK(a >= 0 && a < hi, InvalidModel,
             node.describe() + ": axis " + std::to_string(axis) + " is out of range for rank " +
                 std::to_string(rank));
  return a;
}

Shape broadcast_shapes(const std::vector<Shape>& shapes, const Node& node) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const auto& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& o = out[rank - s.size() + i];
      const int64_t d = s[i];
      if (d == o || d == 1) continue;
      if (o == 1) {
        o = d;
        continue;
      }
      std::string all;
      for (const auto& x : shapes) all += (all.empty() ? "" : " and ") + shape_str(x);
      fail(ErrorCode::InvalidArgument, node.describe() + ": shapes " + all + " do not broadcast");
    }
  }
  return out;
}

std::vector<int64_t> strides_of(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  // Every caller reads `in` through these strides over all of `out`: a shape that does not
  // broadcast would read past its end (found by fuzzing through LayerNormalization's scale).
  bool ok = in.size() <= out.size();
  for (size_t i = 0; ok && i < in.size(); ++i)
    ok = in[i] == 1 || in[i] == out[out.size() - in.size() + i];
  if (!ok)
    throw Error(ErrorCode::InvalidArgument,
                "shape " + shape_str(in) + " does not broadcast to " + shape_str(out));
  std::vector<int64_t> s(out.size(), 0);
  const std::vector<int64_t> own = strides_of(in);
  const size_t lead = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) s[lead + i] = in[i] == 1 ? 0 : own[i];
  return s;
}

BroadcastIterator::BroadcastIterator(const Shape& out,
                                     std::vector<std::vector<int64_t>> operand_strides)
    : total_(numel_of(out)) {
  // Axes of size 1 move no offset; axis d-1 merges into axis d when, for every operand, a step
  // along d-1 is shape[d] steps along d.
  const size_t k = operand_strides.size();
  strides_.assign(k, {});
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;
    bool merge = !shape_.empty();
    for (size_t j = 0; merge && j < k; ++j)
      merge = strides_[j].back() == operand_strides[j][d] * out[d];
    if (merge) {
      shape_.back() *= out[d];
      for (size_t j = 0; j < k; ++j) strides_[j].back() = operand_strides[j][d];
    } else {
      shape_.push_back(out[d]);
      for (size_t j = 0; j < k; ++j) strides_[j].push_back(operand_strides[j][d]);
    }
  }
}

std::vector<int64_t> to_int64_vector(const Tensor& t, const Node& node, const char* what) {
  std::vector<int64_t> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::Int64) {
    std::copy(t.data<int64_t>(), t.data<int64_t>() + t.numel(), out.begin());
  } else if (t.dtype() == DType::Int32) {
    std::copy(t.data<int32_t>(), t.data<int32_t>() + t.numel(), out.begin());
  } else {
    fail(ErrorCode::InvalidModel,
         node.describe() + ": " + what + " must be int32 or int64, got " + dtype_name(t.dtype()));
  }
  return out;
}

Shape resolve_reshape(const Shape& in, const std::vector<int64_t>& target, bool allowzero,
                      const Node& node) {
  Shape out(target.begin(), target.end());
  int64_t infer_at = -1, known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == 0 && !allowzero) {
      VOLT_CHECK(i < in.size(), InvalidArgument,
                 node.describe() + ": shape " + shape_str(target) + " copies dimension " +
                     std::to_string(i) + " of input " + shape_str(in) + ", which does not exist");
      out[i] = in[i];
    }
    if (out[i] == -1) {
      VOLT_CHECK(infer_at < 0, InvalidArgument,
                 node.describe() + ": shape " + shape_str(target) + " has more than one -1");
      infer_at = static_cast<int64_t>(i);
      continue;
    }
    VOLT_CHECK(out[i] >= 0, InvalidArgument,
               node.describe() + ": shape " + shape_str(target) + " has a negative dimension");
    VOLT_CHECK(out[i] == 0 || known <= std::numeric_limits<int64_t>::max() / out[i],
               InvalidArgument,
               node.describe() + ": shape " + shape_str(target) + " has too many elements");
    known *= out[i];
  }
  const int64_t total = numel_of(in);
  if (infer_at >= 0) {
    VOLT_CHECK(known != 0 && total % known == 0, InvalidArgument,
               node.describe() + ": cannot reshape " + shape_str(in) + " to " + shape_str(target));
    out[infer_at] = total / known;
  }
  VOLT_CHECK(numel_of(out) == total, InvalidArgument,
             node.describe() + ": cannot reshape " + shape_str(in) + " (" + std::to_string(total) +
                 " elements) to " + shape_str(target));
  return out;
}

}  // namespace volt
