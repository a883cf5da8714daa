// CsrTensor: construction with every structural check, and conversion to and from dense.
#include <cstring>
#include <limits>
#include <string>

#include "operators/common/dispatch.hpp"
#include "runtime/csr_util.hpp"
#include "runtime/error.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

[[noreturn]] void bad_csr(const std::string& what) {
  fail(ErrorCode::InvalidArgument, "invalid CSR tensor: " + what);
}

// Runs the checks the class promises; O(rows + nnz).
void validate(int64_t rows, int64_t cols, const Tensor& offsets, const Tensor& indices,
              const Tensor& values) {
  if (rows < 0 || cols < 0)
    bad_csr("negative size " + std::to_string(rows) + " x " + std::to_string(cols));
  if (rows == std::numeric_limits<int64_t>::max()) bad_csr("too many rows");
  if (!values.defined() || values.dtype() == DType::String || values.dtype() == DType::Bool)
    bad_csr("values must be a numeric tensor");
  if (offsets.dtype() != DType::Int64 || indices.dtype() != DType::Int64)
    bad_csr("row offsets and column indices must be int64");
  if (offsets.rank() != 1 || indices.rank() != 1 || values.rank() != 1)
    bad_csr("row offsets, column indices and values must be 1-D");
  if (offsets.numel() != rows + 1)
    bad_csr("row offsets has " + std::to_string(offsets.numel()) +
            " entries, want rows + 1 = " + std::to_string(rows + 1));
  const int64_t nnz = values.numel();
  if (indices.numel() != nnz)
    bad_csr(std::to_string(indices.numel()) + " column indices for " + std::to_string(nnz) +
            " values");
  const int64_t* off = offsets.data<int64_t>();
  if (off[0] != 0) bad_csr("row offsets must start at 0, got " + std::to_string(off[0]));
  for (int64_t r = 0; r < rows; ++r)
    if (off[r + 1] < off[r])
      bad_csr("row offsets decrease at row " + std::to_string(r) + " (" + std::to_string(off[r]) +
              " then " + std::to_string(off[r + 1]) + ")");
  if (off[rows] != nnz)
    bad_csr("row offsets end at " + std::to_string(off[rows]) +
            ", want nnz = " + std::to_string(nnz));
  const int64_t* col = indices.data<int64_t>();
  for (int64_t i = 0; i < nnz; ++i)
    if (col[i] < 0 || col[i] >= cols)
      bad_csr("column index " + std::to_string(col[i]) + " at position " + std::to_string(i) +
              " is outside [0, " + std::to_string(cols) + ")");
}

}  // namespace

CsrTensor CsrTensor::create(int64_t rows, int64_t cols, Tensor row_offsets, Tensor col_indices,
                            Tensor values) {
  validate(rows, cols, row_offsets, col_indices, values);
  CsrTensor c;
  c.rows_ = rows;
  c.cols_ = cols;
  c.row_offsets_ = std::move(row_offsets);
  c.col_indices_ = std::move(col_indices);
  c.values_ = std::move(values);
  return c;
}

CsrTensor CsrTensor::to(Device device) const {
  CsrTensor c = *this;
  c.row_offsets_ = row_offsets_.to(device);
  c.col_indices_ = col_indices_.to(device);
  c.values_ = values_.to(device);
  return c;
}

CsrTensor CsrTensor::copy_of(DType dtype, int64_t rows, int64_t cols, int64_t nnz,
                             const int64_t* row_offsets, const int64_t* col_indices,
                             const void* values) {
  if (rows < 0 || cols < 0 || nnz < 0)
    bad_csr("negative size: rows " + std::to_string(rows) + ", cols " + std::to_string(cols) +
            ", nnz " + std::to_string(nnz));
  if (rows == std::numeric_limits<int64_t>::max()) bad_csr("too many rows");
  if (!row_offsets) bad_csr("row_offsets is NULL");
  if (nnz > 0 && (!col_indices || !values)) bad_csr("col_indices or values is NULL");
  if (dtype == DType::String || dtype == DType::Undefined || dtype == DType::Bool)
    bad_csr("values must be of a numeric type");
  return create(rows, cols, Tensor::copy_of(DType::Int64, {rows + 1}, row_offsets),
                Tensor::copy_of(DType::Int64, {nnz}, col_indices),
                Tensor::copy_of(dtype, {nnz}, values));
}

CsrTensor CsrTensor::from_dense(const Tensor& dense) {
  if (dense.rank() != 2)
    bad_csr("from_dense needs a 2-D tensor, got rank " + std::to_string(dense.rank()));
  const int64_t rows = dense.dim(0), cols = dense.dim(1);
  const size_t es = dtype_size(dense.dtype());
  const auto* bytes = static_cast<const char*>(dense.raw());
  const std::string zero(es, '\0');
  int64_t nnz = 0;
  for (int64_t i = 0; i < dense.numel(); ++i)
    nnz += std::memcmp(bytes + i * es, zero.data(), es) != 0;
  Tensor off = Tensor::empty(DType::Int64, {rows + 1});
  Tensor col = Tensor::empty(DType::Int64, {nnz});
  Tensor val = Tensor::empty(dense.dtype(), {nnz});
  int64_t k = 0;
  for (int64_t r = 0; r < rows; ++r) {
    off.data<int64_t>()[r] = k;
    for (int64_t c = 0; c < cols; ++c) {
      const char* e = bytes + (r * cols + c) * es;
      if (std::memcmp(e, zero.data(), es) == 0) continue;
      col.data<int64_t>()[k] = c;
      std::memcpy(static_cast<char*>(val.raw()) + k * es, e, es);
      ++k;
    }
  }
  off.data<int64_t>()[rows] = k;
  return create(rows, cols, std::move(off), std::move(col), std::move(val));
}

void csr_scatter_into(const CsrTensor& a, Tensor& dense) {
  std::memset(dense.raw(), 0, dense.nbytes());
  const int64_t* off = a.row_offsets().data<int64_t>();
  const int64_t* col = a.col_indices().data<int64_t>();
  const int64_t cols = a.cols();
  dispatch_numeric(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = typename Compute<T>::type;
    const T* v = static_cast<const T*>(a.values().raw());
    T* y = static_cast<T*>(dense.raw());
    for (int64_t r = 0; r < a.rows(); ++r)
      for (int64_t i = off[r]; i < off[r + 1]; ++i) {
        T& e = y[r * cols + col[i]];
        e = static_cast<T>(static_cast<C>(e) + static_cast<C>(v[i]));
      }
  });
}

Tensor CsrTensor::to_dense() const {
  Tensor out = allocate_tensor(dtype(), {rows_, cols_}, false);
  csr_scatter_into(*this, out);
  return out;
}

}  // namespace volt
