// RowSparseGrad (ai.volt): the gradient of an embedding table read by Gather on axis 0, as the
// touched rows and their summed gradients instead of a dense table-sized tensor.
//   inputs:  ids_1, dY_1, ids_2, dY_2, ...   (one pair per Gather reading the table)
//   outputs: rows  int64 [u]  sorted, unique, in [0, table_rows)
//            values [u, row...]  Σ of the dY rows gathered from each row
//   attribute table_rows: the table's first dimension (negative ids count from it).
#include <algorithm>
#include <numeric>

#include "operators/common/dispatch.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/common/tensor_values.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

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
    // Every (id, source row) pair across the inputs.
    struct Ref {
      int64_t row;
      const Tensor* grad;
      int64_t index;
    };
    std::vector<Ref> refs;
    Shape row_shape;
    int64_t width = -1;
    for (size_t p = 0; p + 1 < ctx.input_count(); p += 2) {
      const Tensor& ids = ctx.input(p);
      const Tensor& dy = ctx.input(p + 1);
      const std::vector<int64_t> idx = to_int64_vector(ids, ctx.node(), "ids");
      const int64_t n = static_cast<int64_t>(idx.size());
      VOLT_CHECK(dy.rank() >= ids.rank(), InvalidArgument,
                 ctx.node().describe() + ": gradient of rank " + std::to_string(dy.rank()) +
                     " for ids of rank " + std::to_string(ids.rank()));
      const int64_t w = n ? dy.numel() / n : 0;
      if (width < 0) {
        width = w;
        row_shape.assign(dy.shape().begin() + static_cast<long>(ids.rank()), dy.shape().end());
      }
      VOLT_CHECK(w == width && dy.dtype() == ctx.input(1).dtype(), InvalidArgument,
                 ctx.node().describe() + ": gradients of different row sizes or types");
      for (int64_t j = 0; j < n; ++j) {
        const int64_t r = idx[j] < 0 ? idx[j] + table_rows_ : idx[j];
        VOLT_CHECK(r >= 0 && r < table_rows_, InvalidArgument,
                   ctx.node().describe() + ": id " + std::to_string(idx[j]) +
                       " is outside the table's " + std::to_string(table_rows_) + " rows");
        refs.push_back({r, &dy, j});
      }
    }
    std::stable_sort(refs.begin(), refs.end(),
                     [](const Ref& a, const Ref& b) { return a.row < b.row; });
    int64_t unique = 0;
    for (size_t i = 0; i < refs.size(); ++i) unique += i == 0 || refs[i].row != refs[i - 1].row;
    Tensor& rows = ctx.allocate_output(0, DType::Int64, {unique});
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
        int64_t u = -1;
        for (size_t i = 0; i < refs.size(); ++i) {
          const T* src = static_cast<const T*>(refs[i].grad->raw()) + refs[i].index * width;
          if (i == 0 || refs[i].row != refs[i - 1].row) {
            ++u;
            rows.data<int64_t>()[u] = refs[i].row;
            std::copy(src, src + width, out + u * width);
          } else {
            T* dst = out + u * width;
            for (int64_t k = 0; k < width; ++k) dst[k] += src[k];
          }
        }
      }
    });
  }

 private:
  int64_t table_rows_;
};

}  // namespace

VOLT_REGISTER_KERNEL(row_sparse_grad, {.domain = kVoltDomain,
                                       .op = "RowSparseGrad",
                                       .foldable = false,
                                       .create = make_kernel<RowSparseGrad>});

}  // namespace volt
