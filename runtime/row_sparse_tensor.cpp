// RowSparseTensor: construction with every structural check, and the dense form.
#include <cstring>
#include <string>

#include "runtime/error.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

[[noreturn]] void bad(const std::string& what) {
  fail(ErrorCode::InvalidArgument, "invalid row-sparse tensor: " + what);
}

}  // namespace

RowSparseTensor RowSparseTensor::create(Shape dense_shape, Tensor rows, Tensor values) {
  if (dense_shape.empty()) bad("the dense shape must have rank >= 1");
  for (int64_t d : dense_shape)
    if (d < 0) bad("negative dimension in " + shape_str(dense_shape));
  if (!rows.defined() || rows.dtype() != DType::Int64 || rows.rank() != 1)
    bad("rows must be a 1-D int64 tensor");
  if (!values.defined() || values.dtype() == DType::String) bad("values must be a numeric tensor");
  Shape want{rows.numel()};
  want.insert(want.end(), dense_shape.begin() + 1, dense_shape.end());
  if (values.shape() != want)
    bad("values are " + shape_str(values.shape()) + ", want " + shape_str(want) + " for " +
        std::to_string(rows.numel()) + " rows of " + shape_str(dense_shape));
  const int64_t* r = rows.data<int64_t>();
  for (int64_t i = 0; i < rows.numel(); ++i) {
    if (r[i] < 0 || r[i] >= dense_shape[0])
      bad("row " + std::to_string(r[i]) + " is outside [0, " + std::to_string(dense_shape[0]) +
          ")");
    if (i > 0 && r[i] <= r[i - 1])
      bad("rows must be strictly increasing (" + std::to_string(r[i - 1]) + " then " +
          std::to_string(r[i]) + ")");
  }
  RowSparseTensor t;
  t.dense_shape_ = std::move(dense_shape);
  t.rows_ = std::move(rows);
  t.values_ = std::move(values);
  return t;
}

Tensor RowSparseTensor::to_dense() const {
  Tensor d = Tensor::empty(dtype(), dense_shape_);  // zero-filled
  const size_t row_bytes =
      dense_shape_[0] ? d.nbytes() / static_cast<size_t>(dense_shape_[0]) : size_t{0};
  const int64_t* r = rows_.data<int64_t>();
  for (int64_t i = 0; i < rows_.numel(); ++i)
    std::memcpy(static_cast<char*>(d.raw()) + static_cast<size_t>(r[i]) * row_bytes,
                static_cast<const char*>(values_.raw()) + static_cast<size_t>(i) * row_bytes,
                row_bytes);
  return d;
}

}  // namespace volt
