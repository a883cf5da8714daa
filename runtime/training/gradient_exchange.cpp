#include "runtime/training/gradient_exchange.hpp"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <type_traits>

#include "operators/common/convert.hpp"
#include "runtime/error.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

template <class T>
void put(std::string& out, const T* p, size_t n) {
  out.append(reinterpret_cast<const char*>(p), n * sizeof(T));
}

size_t row_elems(const Shape& dense_shape) {
  size_t e = 1;
  for (size_t d = 1; d < dense_shape.size(); ++d) e *= static_cast<size_t>(dense_shape[d]);
  return e;
}

// dst = g (the first micro-batch) or dst += g, in T (g converted to it first).
template <class T>
void accumulate_into(T* dst, const Tensor& g, size_t n, bool first) {
  constexpr DType type = std::is_same_v<T, double> ? DType::Double : DType::Float;
  const Tensor c = g.dtype() == type ? g : converted(g, type);
  const T* src = c.data<T>();
  if (first) {
    std::memcpy(dst, src, n * sizeof(T));
    return;
  }
#pragma omp simd
  for (size_t e = 0; e < n; ++e) dst[e] += src[e];
}

// p *= scale over n elements, lent as a tensor of `shape` (the bucket keeps the memory).
template <class T>
Tensor scaled_view(T* p, size_t n, double scale, const Shape& shape) {
  constexpr DType type = std::is_same_v<T, double> ? DType::Double : DType::Float;
#pragma omp simd
  for (size_t e = 0; e < n; ++e) p[e] = static_cast<T>(p[e] * scale);
  return Tensor::view(type, shape, p,
                      std::shared_ptr<void>(static_cast<void*>(nullptr), [](void*) {}));
}

// One part of a sum of row-sparse gradients: ascending row ids and their values, wherever they
// live (a tensor, or a block another rank sent).
struct RowsView {
  const int64_t* rows;
  size_t n;
  const char* values;
};

// The union of the parts' rows, ascending (each part ascends).
std::vector<int64_t> row_union(const std::vector<RowsView>& parts) {
  std::vector<int64_t> rows, merged;
  for (const RowsView& p : parts) {
    merged.clear();
    std::set_union(rows.begin(), rows.end(), p.rows, p.rows + p.n, std::back_inserter(merged));
    rows.swap(merged);
  }
  return rows;
}

// `rows`: row_union(parts).
template <class T>
RowSparseTensor sum_views(const Shape& shape, DType dtype, const std::vector<RowsView>& parts,
                          const std::vector<int64_t>& rows) {
  const size_t width = row_elems(shape);
  Shape vshape = shape;
  vshape[0] = static_cast<int64_t>(rows.size());
  Tensor values = allocate_tensor(dtype, vshape);
  T* out = values.data<T>();
  std::vector<char> written(rows.size(), 0);
  for (const RowsView& p : parts) {
    const T* pv = reinterpret_cast<const T*>(p.values);
    size_t at = 0;  // both row lists ascend
    for (size_t i = 0; i < p.n; ++i) {
      while (rows[at] != p.rows[i]) ++at;
      T* dst = out + at * width;
      const T* src = pv + i * width;
      // The first contribution is copied, not added to zero: 0 + (-0) would lose the sign.
      if (written[at]) {
#pragma omp simd
        for (size_t e = 0; e < width; ++e) dst[e] += src[e];
      } else {
        std::memcpy(dst, src, width * sizeof(T));
      }
      written[at] = 1;
    }
  }
  return RowSparseTensor::create(shape, Tensor::from<int64_t>(rows, {vshape[0]}),
                                 std::move(values));
}

RowSparseTensor sum_views(const Shape& shape, DType dtype, const std::vector<RowsView>& parts,
                          const std::vector<int64_t>& rows) {
  if (dtype == DType::Double) return sum_views<double>(shape, dtype, parts, rows);
  VOLT_CHECK(dtype == DType::Float, NotImplemented,
             std::string("row-sparse gradients in ") + dtype_name(dtype) +
                 " cannot be summed (fp32 and fp64 can)");
  return sum_views<float>(shape, dtype, parts, rows);
}

}  // namespace

DenseGradientBuckets::DenseGradientBuckets(std::vector<Slot> slots, size_t bucket_bytes)
    : slots_(std::move(slots)), added_(slots_.size(), 0) {
  for (const Slot& s : slots_) {
    const bool fp64 = s.dtype == DType::Double;
    const size_t n = static_cast<size_t>(numel_of(s.shape));
    const size_t elem = fp64 ? sizeof(double) : sizeof(float);
    if (buckets_.empty() || buckets_.back().fp64 != fp64 ||
        (buckets_.back().members &&
         (buckets_.back().fp64 ? buckets_.back().d.size() : buckets_.back().f.size()) * elem +
                 n * elem >
             bucket_bytes)) {
      buckets_.emplace_back();
      buckets_.back().fp64 = fp64;
    }
    Bucket& b = buckets_.back();
    bucket_of_.push_back(buckets_.size() - 1);
    offset_.push_back(fp64 ? b.d.size() : b.f.size());
    if (fp64)
      b.d.resize(b.d.size() + n);
    else
      b.f.resize(b.f.size() + n);
    ++b.members;
  }
}

void DenseGradientBuckets::begin(bool first, Communicator* exchange) {
  first_ = first;
  exchange_ = exchange;
  next_start_ = 0;
  std::fill(added_.begin(), added_.end(), 0);
  for (Bucket& b : buckets_) {
    b.added = 0;
    b.started = false;
  }
}

void DenseGradientBuckets::add(size_t i, const Tensor& gradient) {
  VOLT_CHECK(i < slots_.size() && !added_[i], Runtime, "gradient slot added twice");
  const Slot& s = slots_[i];
  const Tensor host = gradient.device().is_cpu() ? gradient : gradient.to(Device{});
  VOLT_CHECK(host.shape() == s.shape, Runtime,
             "a gradient is " + shape_str(host.shape()) + ", its weight " + shape_str(s.shape));
  Bucket& b = buckets_[bucket_of_[i]];
  const size_t n = static_cast<size_t>(host.numel());
  if (b.fp64)
    accumulate_into(b.d.data() + offset_[i], host, n, first_);
  else
    accumulate_into(b.f.data() + offset_[i], host, n, first_);
  added_[i] = 1;
  ++b.added;
  if (exchange_) {
    start_ready();
    exchange_->progress();
  }
}

// The last bucket is complete only when the backward pass is (nothing is left to overlap): it
// is summed in finish(), by the communicator's faster completing all-reduce.
void DenseGradientBuckets::start_ready() {
  while (next_start_ + 1 < buckets_.size() &&
         buckets_[next_start_].added == buckets_[next_start_].members) {
    Bucket& b = buckets_[next_start_++];
    if (b.fp64) continue;  // (summed, blocking, in finish())
    exchange_->start_sum(b.f.data(), b.f.size());
    b.started = true;
  }
}

void DenseGradientBuckets::finish() {
  for (size_t i = 0; i < slots_.size(); ++i)
    VOLT_CHECK(added_[i], Runtime, "the backward pass did not produce every gradient");
  if (!exchange_) return;
  start_ready();
  exchange_->wait_started();
  for (Bucket& b : buckets_)
    if (b.fp64)
      exchange_->sum(b.d.data(), b.d.size());
    else if (!b.started)
      exchange_->sum(b.f.data(), b.f.size());
  exchange_ = nullptr;
}

Tensor DenseGradientBuckets::gradient(size_t i, double scale) {
  // Scaled in place and lent as a view: the sums are not needed again before the next begin().
  const Slot& s = slots_[i];
  Bucket& b = buckets_[bucket_of_[i]];
  const size_t n = static_cast<size_t>(numel_of(s.shape));
  if (b.fp64) return scaled_view(b.d.data() + offset_[i], n, scale, s.shape);
  const Tensor out = scaled_view(b.f.data() + offset_[i], n, scale, s.shape);
  return s.dtype == DType::Float ? out : converted(out, s.dtype);
}

RowSparseTensor sum_rows(const std::vector<RowSparseTensor>& parts) {
  VOLT_CHECK(!parts.empty(), Runtime, "sum_rows of nothing");
  if (parts.size() == 1) return parts[0];
  std::vector<RowsView> views;
  for (const auto& p : parts)
    views.push_back({p.rows().data<int64_t>(), static_cast<size_t>(p.row_count()),
                     static_cast<const char*>(p.values().raw())});
  return sum_views(parts[0].dense_shape(), parts[0].dtype(), views, row_union(views));
}

void exchange_rows(Communicator& comm, std::vector<RowSparseTensor>& tables, double dense_fraction,
                   RowExchangeBuffers& buffers) {
  const size_t ranks = static_cast<size_t>(comm.size());
  // 1. Every rank's row ids of every table: [count, ids...] per table.
  std::vector<int64_t>& mine = buffers.my_ids;
  mine.clear();
  for (const auto& t : tables) {
    mine.push_back(t.row_count());
    mine.insert(mine.end(), t.rows().data<int64_t>(), t.rows().data<int64_t>() + t.row_count());
  }
  Communicator::Gathered& ids = buffers.ids;
  comm.gather_all(mine.data(), mine.size() * sizeof(int64_t), ids);
  // rows[t][r]: rank r's ids of table t, inside the gathered buffer.
  std::vector<std::vector<RowsView>> rows(tables.size(), std::vector<RowsView>(ranks));
  for (size_t r = 0; r < ranks; ++r) {
    const int64_t* p = reinterpret_cast<const int64_t*>(ids.of(r));
    const int64_t* end = p + ids.size[r] / sizeof(int64_t);
    for (size_t t = 0; t < tables.size(); ++t) {
      VOLT_CHECK(p < end && p + 1 + *p <= end, Runtime,
                 "rank " + std::to_string(r) + " sent a malformed list of gradient rows");
      rows[t][r] = {p + 1, static_cast<size_t>(*p), nullptr};
      p += 1 + *p;
    }
  }
  // 2. Each table's union decides how its values travel (the same decision on every rank).
  std::vector<char> dense(tables.size(), 0);
  std::vector<std::vector<int64_t>> unions(tables.size());
  size_t value_bytes = 0;
  for (size_t t = 0; t < tables.size(); ++t) {
    unions[t] = row_union(rows[t]);
    const double table_rows = static_cast<double>(tables[t].dense_shape()[0]);
    dense[t] = static_cast<double>(unions[t].size()) > dense_fraction * table_rows;
    if (!dense[t]) value_bytes += tables[t].values().nbytes();
  }
  // 3a. The rows' values, gathered, then summed in rank order.
  std::vector<char>& values = buffers.my_values;
  if (values.size() < value_bytes + 1) values.resize(value_bytes + 1);
  size_t at = 0;
  for (size_t t = 0; t < tables.size(); ++t)
    if (!dense[t]) {
      std::memcpy(values.data() + at, tables[t].values().raw(), tables[t].values().nbytes());
      at += tables[t].values().nbytes();
    }
  Communicator::Gathered& gathered = buffers.values;
  if (std::find(dense.begin(), dense.end(), 0) != dense.end())
    comm.gather_all(values.data(), value_bytes, gathered);
  std::vector<size_t> read(ranks, 0);
  for (size_t t = 0; t < tables.size(); ++t) {
    const RowSparseTensor& local = tables[t];
    const Shape& shape = local.dense_shape();
    const size_t row_bytes = row_elems(shape) * dtype_size(local.dtype());
    if (!dense[t]) {
      for (size_t r = 0; r < ranks; ++r) {
        const size_t n = rows[t][r].n * row_bytes;
        VOLT_CHECK(read[r] + n <= gathered.size[r], Runtime,
                   "rank " + std::to_string(r) + " sent fewer row values than row ids");
        rows[t][r].values = gathered.of(r) + read[r];
        read[r] += n;
      }
      tables[t] = sum_views(shape, local.dtype(), rows[t], unions[t]);
      continue;
    }
    // 3b. The whole table, all-reduced; the union's rows kept.
    Tensor full = local.to_dense();
    VOLT_CHECK(full.dtype() == DType::Float || full.dtype() == DType::Double, NotImplemented,
               "row-sparse gradients in fp32 or fp64 only");
    if (full.dtype() == DType::Float)
      comm.sum(full.data<float>(), static_cast<size_t>(full.numel()));
    else
      comm.sum(full.data<double>(), static_cast<size_t>(full.numel()));
    const std::vector<int64_t>& all = unions[t];
    Shape vshape = shape;
    vshape[0] = static_cast<int64_t>(all.size());
    Tensor v = allocate_tensor(local.dtype(), vshape);
    for (size_t i = 0; i < all.size(); ++i)
      std::memcpy(static_cast<char*>(v.raw()) + i * row_bytes,
                  static_cast<const char*>(full.raw()) + static_cast<size_t>(all[i]) * row_bytes,
                  row_bytes);
    tables[t] =
        RowSparseTensor::create(shape, Tensor::from<int64_t>(all, {vshape[0]}), std::move(v));
  }
}

void scale_rows_in_place(RowSparseTensor& g, double scale) {
  Tensor v = g.values();  // (shares the buffer)
  if (v.dtype() == DType::Float) {
    float* p = v.data<float>();
#pragma omp simd
    for (int64_t e = 0; e < v.numel(); ++e) p[e] = static_cast<float>(p[e] * scale);
  } else if (v.dtype() == DType::Double) {
    double* p = v.data<double>();
    for (int64_t e = 0; e < v.numel(); ++e) p[e] *= scale;
  }
}

}  // namespace volt
