// Row-sparse gradients (ai.volt), the touched rows and their summed gradients instead of a dense
// tensor the size of the weight.
//
// RowSparseGrad: the gradient of an embedding table read by Gather on axis 0.
//   inputs:  ids_1, dY_1, ids_2, dY_2, ...   (one pair per Gather reading the table)
//   outputs: rows  int64 [u]  sorted, unique, in [0, table_rows)
//            values [u, row...]  Σ of the dY rows gathered from each row
//   attribute table_rows: the table's first dimension (negative ids count from it).
//
// CsrWeightGrad: the gradient of W in Y = alpha · X · W where X is a CSR input [m, K]: row k of
// dW = alpha · Xᵀ · dY is non-zero only where column k of X holds a non-zero.
//   inputs:  X (CSR float [m, K]), dY [m, n]
//   outputs: rows  int64 [u]  the columns of X that hold non-zeros, sorted
//            values [u, n]
//   attribute alpha (default 1).
#include <algorithm>
#include <numeric>
#include <utility>

#include "operators/common/dispatch.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/common/tensor_values.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

// Sorts values in [0, bound) by their bits, 11 at a time (least significant first): a batch's
// ids need two or three passes, where a comparison sort mispredicts a branch at every other
// comparison.
void radix_sort(std::vector<int64_t>& v, int64_t bound) {
  constexpr int kBits = 11;
  constexpr size_t kBuckets = size_t{1} << kBits;
  std::vector<int64_t> tmp(v.size());
  std::vector<size_t> start(kBuckets);
  for (int shift = 0; shift < 64 && (bound - 1) >> shift > 0; shift += kBits) {
    std::fill(start.begin(), start.end(), 0);
    for (int64_t x : v) ++start[static_cast<size_t>(x >> shift) & (kBuckets - 1)];
    size_t sum = 0;
    for (size_t& c : start) sum += std::exchange(c, sum);
    for (int64_t x : v) tmp[start[static_cast<size_t>(x >> shift) & (kBuckets - 1)]++] = x;
    v.swap(tmp);
  }
}

// The index of `key` in `sorted`, which holds it: a binary search whose steps are conditional
// moves, not branches (the ids of a batch are in no order, so a branch would guess wrong half of
// the time).
int64_t position_of(const std::vector<int64_t>& sorted, int64_t key) {
  const int64_t* base = sorted.data();
  int64_t n = static_cast<int64_t>(sorted.size());
  while (n > 1) {
    const int64_t half = n / 2;
    base += static_cast<int64_t>(base[half - 1] < key) * half;  // GCC emitted a branch for ?:
    n -= half;
  }
  return base - sorted.data();
}

class RowSparseGrad final : public Kernel {
 public:
  explicit RowSparseGrad(const Node& n) : table_rows_(n.attr_int("table_rows")) {}

  void infer(InferContext& ctx) const override {
    if (ctx.input_count() % 2 != 0 || ctx.input_count() == 0)
      ctx.error("takes (ids, gradient) pairs");
    ctx.set_output_unknown(0, DType::Int64);
    ctx.set_output_unknown(1, ctx.dtype(1));
  }

  void run(RunContext& ctx) const override {
    // Every id across the inputs, checked, in input order.
    std::vector<std::vector<int64_t>> ids(ctx.input_count() / 2);
    std::vector<int64_t> sorted;
    Shape row_shape;
    int64_t width = -1;
    for (size_t p = 0; p + 1 < ctx.input_count(); p += 2) {
      const Tensor& id_tensor = ctx.input(p);
      const Tensor& dy = ctx.input(p + 1);
      std::vector<int64_t>& idx = ids[p / 2];
      idx = to_int64_vector(id_tensor, ctx.node(), "ids");
      const int64_t n = static_cast<int64_t>(idx.size());
      VOLT_CHECK(dy.rank() >= id_tensor.rank(), InvalidArgument,
                 ctx.node().describe() + ": gradient of rank " + std::to_string(dy.rank()) +
                     " for ids of rank " + std::to_string(id_tensor.rank()));
      const int64_t w = n ? dy.numel() / n : 0;
      if (width < 0) {
        width = w;
        row_shape.assign(dy.shape().begin() + static_cast<long>(id_tensor.rank()),
                         dy.shape().end());
      }
      VOLT_CHECK(w == width && dy.dtype() == ctx.input(1).dtype() && w * n == dy.numel(),
                 InvalidArgument,
                 ctx.node().describe() + ": gradients of different row sizes or types");
      for (int64_t& r : idx) {
        VOLT_CHECK(r >= -table_rows_ && r < table_rows_, InvalidArgument,
                   ctx.node().describe() + ": id " + std::to_string(r) +
                       " is outside the table's " + std::to_string(table_rows_) + " rows");
        if (r < 0) r += table_rows_;
      }
      sorted.insert(sorted.end(), idx.begin(), idx.end());
    }
    // The touched rows, sorted and unique; each id's gradient row is then added to its row's
    // slot in input order (the same order of additions as a dense scatter-add).
    radix_sort(sorted, table_rows_);
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    const int64_t unique = static_cast<int64_t>(sorted.size());
    Tensor& rows = ctx.allocate_output(0, DType::Int64, {unique});
    std::copy(sorted.begin(), sorted.end(), rows.data<int64_t>());
    Shape vshape{unique};
    vshape.insert(vshape.end(), row_shape.begin(), row_shape.end());
    Tensor& values = ctx.allocate_output(1, ctx.input(1).dtype(), vshape);
    const DType dt = values.dtype();
    VOLT_CHECK(dt == DType::Float || dt == DType::Double, NotImplemented,
               ctx.node().describe() + ": row-sparse gradients are float32 or float64");
    dispatch_numeric(dt, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<T>) {
        T* out = static_cast<T*>(values.raw());
        std::fill(out, out + values.numel(), T(0));
        for (size_t p = 0; p < ids.size(); ++p) {
          const T* src = static_cast<const T*>(ctx.input(2 * p + 1).raw());
          for (size_t j = 0; j < ids[p].size(); ++j) {
            const int64_t slot = position_of(sorted, ids[p][j]);
            T* dst = out + slot * width;
            const T* row = src + static_cast<int64_t>(j) * width;
            for (int64_t k = 0; k < width; ++k) dst[k] += row[k];
          }
        }
      }
    });
  }

 private:
  int64_t table_rows_;
};

class CsrWeightGrad final : public Kernel {
 public:
  explicit CsrWeightGrad(const Node& n) : alpha_(n.attr_float("alpha", 1.0f)) {}

  void infer(InferContext& ctx) const override {
    if (ctx.input_count() != 2 || ctx.input(0).kind != ValueInfo::Kind::SparseTensor ||
        ctx.dtype(0) != DType::Float || ctx.dtype(1) != DType::Float)
      ctx.error("takes a float CSR matrix and a float gradient");
    ctx.set_output_unknown(0, DType::Int64);
    ctx.set_output_unknown(1, DType::Float);
  }

  void run(RunContext& ctx) const override {
    const CsrTensor& x = ctx.input_value(0).csr();
    const Tensor& dy = ctx.input(1);
    VOLT_CHECK(dy.rank() == 2 && dy.dim(0) == x.rows(), InvalidArgument,
               ctx.node().describe() + ": the gradient " + shape_str(dy.shape()) +
                   " does not match the CSR input's " + std::to_string(x.rows()) + " rows");
    const int64_t n = dy.dim(1);
    const int64_t* off = x.row_offsets().data<int64_t>();
    const int64_t* col = x.col_indices().data<int64_t>();
    const float* val = x.values().data<float>();
    std::vector<int64_t> sorted(col, col + x.nnz());  // CsrTensor checked them against cols
    radix_sort(sorted, x.cols());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    const int64_t unique = static_cast<int64_t>(sorted.size());
    Tensor& rows = ctx.allocate_output(0, DType::Int64, {unique});
    std::copy(sorted.begin(), sorted.end(), rows.data<int64_t>());
    Tensor& values = ctx.allocate_output(1, DType::Float, {unique, n});
    float* out = values.data<float>();
    std::fill(out, out + values.numel(), 0.0f);
    // Row by row of X, non-zero by non-zero: the same order of additions on every run.
    const float* g = dy.data<float>();
    for (int64_t r = 0; r < x.rows(); ++r)
      for (int64_t i = off[r]; i < off[r + 1]; ++i) {
        float* dst = out + position_of(sorted, col[i]) * n;
        const float a = alpha_ * val[i];
        const float* src = g + r * n;
        for (int64_t j = 0; j < n; ++j) dst[j] += a * src[j];
      }
  }

 private:
  float alpha_;
};

}  // namespace

VOLT_REGISTER_KERNEL(csr_weight_grad, {.domain = kVoltDomain,
                                       .op = "CsrWeightGrad",
                                       .foldable = false,
                                       .csr_input0 = true,
                                       .create = make_kernel<CsrWeightGrad>});
VOLT_REGISTER_KERNEL(row_sparse_grad, {.domain = kVoltDomain,
                                       .op = "RowSparseGrad",
                                       .foldable = false,
                                       .create = make_kernel<RowSparseGrad>});

}  // namespace volt
