// Indexing ops: GatherElements, GatherND, ScatterElements (and the old Scatter), ScatterND,
// OneHot, Compress, NonZero, TopK, Unique.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <type_traits>

#include "operators/common/dispatch.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

int64_t checked_index(int64_t i, int64_t n, const Node& node) {
  VOLT_CHECK(i >= -n && i < n, InvalidArgument,
             node.describe() + ": index " + std::to_string(i) + " is out of range [" +
                 std::to_string(-n) + ", " + std::to_string(n) + ")");
  return i < 0 ? i + n : i;
}

// What the element-indexed loops (GatherElements, ScatterElements) need of the indices' shape:
// data's rank, and no axis but `axis` longer than data's (those coordinates are used as they are).
void check_element_indices(const Shape& is, const Shape& data, int64_t axis, const Node& node) {
  VOLT_CHECK(is.size() == data.size(), InvalidArgument,
             node.describe() + ": indices must have the rank of data");
  for (size_t d = 0; d < is.size(); ++d)
    VOLT_CHECK(static_cast<int64_t>(d) == axis || is[d] <= data[d], InvalidArgument,
               node.describe() + ": indices " + shape_str(is) + " reach past data " +
                   shape_str(data) + " on axis " + std::to_string(d));
}

// The indices of GatherElements and ScatterElements as int64 (read in place where they are), each
// checked against the axis's length.
struct ElementIndices {
  std::vector<int64_t> converted;
  const int64_t* data = nullptr;
};
ElementIndices element_indices(const Tensor& t, int64_t n_axis, const Node& node) {
  ElementIndices ix;
  if (t.dtype() == DType::Int64) {
    ix.data = t.data<int64_t>();
  } else {
    ix.converted = to_int64_vector(t, node, "indices");
    ix.data = ix.converted.data();
  }
  const int64_t total = t.numel();
  bool in_range = true;
  for (int64_t e = 0; e < total; ++e) in_range &= ix.data[e] >= -n_axis && ix.data[e] < n_axis;
  if (!in_range)
    for (int64_t e = 0; e < total; ++e) checked_index(ix.data[e], n_axis, node);
  return ix;
}

// Row `row` of the indices' last axis (indices of shape `is`, rank r > 0): its data offset from
// its own coordinates but the last and `axis`.
int64_t row_base(int64_t row, const Shape& is, int64_t axis, const std::vector<int64_t>& ds) {
  int64_t base = 0;
  for (size_t d = is.size() - 1, rem = static_cast<size_t>(row); d-- > 0;) {
    const int64_t i = static_cast<int64_t>(rem % static_cast<size_t>(is[d]));
    rem /= static_cast<size_t>(is[d]);
    if (static_cast<int64_t>(d) != axis) base += i * ds[d];
  }
  return base;
}

// out[...i_axis...] = data[...indices[...]...] along one axis, indices shaped like out.
class GatherElements final : public Kernel {
 public:
  explicit GatherElements(const Node& n) : axis_(n.attr_int("axis", 0)) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.dtype(0), ctx.shape(1)); }
  // The indices checked first (int64 ones read in place), on this thread; then rows of the
  // indices' last axis across the threads, each with its data offset computed once, negative
  // indices wrapped as they are read.
  void run(RunContext& ctx) const override {
    const Tensor& data = ctx.input(0);
    const Shape& is = ctx.input(1).shape();
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(data.rank()), ctx.node());
    check_element_indices(is, data.shape(), axis, ctx.node());
    const int64_t n_axis = data.dim(axis), total = ctx.input(1).numel();
    const ElementIndices ix_all = element_indices(ctx.input(1), n_axis, ctx.node());
    const int64_t* indices = ix_all.data;
    const auto ds = strides_of(data.shape());
    const size_t r = is.size();
    if (total == 0) return;
    const int64_t len = r == 0 ? 1 : is[r - 1], rows = total / len;
    const bool along_rows = r > 0 && axis == static_cast<int64_t>(r) - 1;
    dispatch_any(data.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = static_cast<const T*>(data.raw());
      T* dst = static_cast<T*>(ctx.output(0).raw());
      parallel_chunks(rows, std::max<int64_t>(1, 32768 / len), [&](int64_t lo, int64_t hi) {
        for (int64_t row = lo; row < hi; ++row) {
          const int64_t base = r > 0 ? row_base(row, is, axis, ds) : 0;
          const int64_t* ix = indices + row * len;
          T* out = dst + row * len;
          auto at = [n_axis](int64_t i) { return i < 0 ? i + n_axis : i; };
          if (along_rows) {
            for (int64_t j = 0; j < len; ++j) out[j] = src[base + at(ix[j])];
          } else {
            const int64_t step = r > 0 ? ds[r - 1] : 0, axis_stride = ds[static_cast<size_t>(axis)];
            for (int64_t j = 0; j < len; ++j)
              out[j] = src[base + j * step + at(ix[j]) * axis_stride];
          }
        }
      });
    });
  }

 private:
  int64_t axis_;
};

enum class ScatterReduce { None, Add, Mul, Max, Min };

ScatterReduce reduction_of(const Node& n) {
  const std::string r = n.attr_string("reduction", "none");
  if (r == "none") return ScatterReduce::None;
  if (r == "add") return ScatterReduce::Add;
  if (r == "mul") return ScatterReduce::Mul;
  if (r == "max") return ScatterReduce::Max;
  if (r == "min") return ScatterReduce::Min;
  fail(ErrorCode::InvalidModel, n.describe() + ": unknown reduction '" + r + "'");
}

template <class T>
void combine(T& dst, const T& v, ScatterReduce r) {
  if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, bool>) {
    dst = v;
  } else {
    using C = typename Compute<T>::type;
    const C a = static_cast<C>(dst), b = static_cast<C>(v);
    switch (r) {
      case ScatterReduce::None:
        dst = v;
        break;
      case ScatterReduce::Add:
        dst = static_cast<T>(a + b);
        break;
      case ScatterReduce::Mul:
        dst = static_cast<T>(a * b);
        break;
      case ScatterReduce::Max:
        dst = static_cast<T>(std::max(a, b));
        break;
      case ScatterReduce::Min:
        dst = static_cast<T>(std::min(a, b));
        break;
    }
  }
}

class ScatterElements final : public Kernel {
 public:
  explicit ScatterElements(const Node& n)
      : axis_(n.attr_int("axis", 0)), reduction_(reduction_of(n)) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.dtype(0), ctx.shape(0)); }
  void run(RunContext& ctx) const override {
    const Tensor& data = ctx.input(0);
    const Tensor& upd = ctx.input(2);
    const Shape& is = ctx.input(1).shape();
    VOLT_CHECK(upd.shape() == is, InvalidArgument,
               ctx.node().describe() + ": updates must have the shape of indices");
    VOLT_CHECK(upd.dtype() == data.dtype(), InvalidModel,
               ctx.node().describe() + ": updates must have the dtype of data");
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(data.rank()), ctx.node());
    check_element_indices(is, data.shape(), axis, ctx.node());
    const int64_t n_axis = data.dim(axis), total = ctx.input(1).numel();
    const ElementIndices ix = element_indices(ctx.input(1), n_axis, ctx.node());
    const auto ds = strides_of(data.shape());
    const size_t r = is.size();
    // Row by row of the indices' last axis, each row's offset computed once (an offset per
    // element by division took 19 of a graph network's 21 ms: 3 x 640 thousand rows of features
    // added into their nodes), in order: duplicates combine as the loop meets them.
    const int64_t len = r == 0 ? 1 : is[r - 1], rows = total == 0 ? 0 : total / len;
    const bool along_rows = r > 0 && axis == static_cast<int64_t>(r) - 1;
    const int64_t step = r > 0 ? ds[r - 1] : 0,
                  axis_stride = r > 0 ? ds[static_cast<size_t>(axis)] : 0;
    Tensor& out = ctx.output(0);
    dispatch_any(data.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* dst = static_cast<T*>(out.raw());
      std::copy(static_cast<const T*>(data.raw()), static_cast<const T*>(data.raw()) + data.numel(),
                dst);
      const T* u = static_cast<const T*>(upd.raw());
      auto at = [n_axis](int64_t i) { return i < 0 ? i + n_axis : i; };
      // (The reduction a compile-time constant of each loop: chosen once, outside them.)
      auto scatter = [&](auto reduction_constant) {
        constexpr ScatterReduce reduction = decltype(reduction_constant)::value;
        for (int64_t row = 0; row < rows; ++row) {
          const int64_t base = r > 0 ? row_base(row, is, axis, ds) : 0;
          const int64_t* ir = ix.data + row * len;
          const T* ur = u + row * len;
          if (along_rows) {
            for (int64_t j = 0; j < len; ++j) combine(dst[base + at(ir[j])], ur[j], reduction);
          } else {
            for (int64_t j = 0; j < len; ++j)
              combine(dst[base + j * step + at(ir[j]) * axis_stride], ur[j], reduction);
          }
        }
      };
      switch (reduction_) {
        case ScatterReduce::None:
          return scatter(std::integral_constant<ScatterReduce, ScatterReduce::None>{});
        case ScatterReduce::Add:
          return scatter(std::integral_constant<ScatterReduce, ScatterReduce::Add>{});
        case ScatterReduce::Mul:
          return scatter(std::integral_constant<ScatterReduce, ScatterReduce::Mul>{});
        case ScatterReduce::Max:
          return scatter(std::integral_constant<ScatterReduce, ScatterReduce::Max>{});
        case ScatterReduce::Min:
          return scatter(std::integral_constant<ScatterReduce, ScatterReduce::Min>{});
      }
    });
  }

 private:
  int64_t axis_;
  ScatterReduce reduction_;
};

class ScatterND final : public Kernel {
 public:
  explicit ScatterND(const Node& n) : reduction_(reduction_of(n)) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.dtype(0), ctx.shape(0)); }
  void run(RunContext& ctx) const override {
    const Tensor& data = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    const auto idx = to_int64_vector(indices, ctx.node(), "indices");
    VOLT_CHECK(indices.rank() >= 1, InvalidArgument,
               ctx.node().describe() + ": indices must have rank >= 1");
    const int64_t k = indices.shape().back();
    VOLT_CHECK(k <= static_cast<int64_t>(data.rank()), InvalidArgument,
               ctx.node().describe() + ": index depth exceeds data rank");
    const auto ds = strides_of(data.shape());
    int64_t slice = 1;
    for (size_t d = static_cast<size_t>(k); d < data.rank(); ++d) slice *= data.dim(d);
    const int64_t n = k ? static_cast<int64_t>(idx.size()) / k : 0;
    // updates must be indices.shape[:-1] + data.shape[k:].
    Shape want(indices.shape().begin(), indices.shape().end() - 1);
    want.insert(want.end(), data.shape().begin() + k, data.shape().end());
    VOLT_CHECK(
        ctx.input(2).shape() == want && ctx.input(2).dtype() == data.dtype(), InvalidArgument,
        ctx.node().describe() + ": updates must be " + dtype_name(data.dtype()) + shape_str(want) +
            ", got " + dtype_name(ctx.input(2).dtype()) + shape_str(ctx.input(2).shape()));
    Tensor& out = ctx.output(0);
    dispatch_any(data.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* dst = static_cast<T*>(out.raw());
      std::copy(static_cast<const T*>(data.raw()), static_cast<const T*>(data.raw()) + data.numel(),
                dst);
      const T* u = static_cast<const T*>(ctx.input(2).raw());
      for (int64_t j = 0; j < n; ++j) {
        int64_t off = 0;
        for (int64_t d = 0; d < k; ++d)
          off += checked_index(idx[j * k + d], data.dim(d), ctx.node()) * ds[d];
        for (int64_t s = 0; s < slice; ++s) combine(dst[off + s], u[j * slice + s], reduction_);
      }
    });
  }

 private:
  ScatterReduce reduction_;
};

class GatherND final : public Kernel {
 public:
  explicit GatherND(const Node& n) : batch_dims_(n.attr_int("batch_dims", 0)) {}
  void infer(InferContext& ctx) const override {
    const Shape& d = ctx.shape(0);
    const Shape& i = ctx.shape(1);
    VOLT_CHECK(!i.empty(), InvalidArgument,
               ctx.node().describe() + ": indices must have rank >= 1");
    const int64_t k = i.back();
    VOLT_CHECK(batch_dims_ + k <= static_cast<int64_t>(d.size()), InvalidArgument,
               ctx.node().describe() + ": index depth exceeds data rank");
    Shape out(i.begin(), i.end() - 1);
    out.insert(out.end(), d.begin() + batch_dims_ + k, d.end());
    ctx.set_output(0, ctx.dtype(0), out);
  }
  void run(RunContext& ctx) const override {
    const Tensor& data = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    const auto idx = to_int64_vector(indices, ctx.node(), "indices");
    const int64_t k = indices.shape().back();
    const auto ds = strides_of(data.shape());
    int64_t batch = 1, slice = 1;
    for (int64_t d = 0; d < batch_dims_; ++d) batch *= data.dim(d);
    for (size_t d = static_cast<size_t>(batch_dims_ + k); d < data.rank(); ++d)
      slice *= data.dim(d);
    const int64_t per_batch =
        batch ? static_cast<int64_t>(idx.size()) / std::max<int64_t>(k, 1) / batch : 0;
    const int64_t batch_stride = batch_dims_ > 0 ? ds[batch_dims_ - 1] : 0;
    dispatch_any(data.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = static_cast<const T*>(data.raw());
      T* dst = static_cast<T*>(ctx.output(0).raw());
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t j = 0; j < per_batch; ++j) {
          int64_t off = b * batch_stride;
          const int64_t row = b * per_batch + j;
          for (int64_t d = 0; d < k; ++d)
            off += checked_index(idx[row * k + d], data.dim(batch_dims_ + d), ctx.node()) *
                   ds[batch_dims_ + d];
          std::copy(src + off, src + off + slice, dst + row * slice);
        }
    });
  }

 private:
  int64_t batch_dims_;
};

class OneHot final : public Kernel {
 public:
  explicit OneHot(const Node& n) : axis_(n.attr_int("axis", -1)) {}
  void infer(InferContext& ctx) const override {
    const Tensor* depth = ctx.input_tensor(1);
    if (!depth) return ctx.set_output_unknown(0, ctx.dtype(2));
    Shape out = ctx.shape(0);
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(out.size()) + 1, ctx.node());
    out.insert(out.begin() + axis, depth_of(*depth));
    ctx.set_output(0, ctx.dtype(2), out);
  }
  void run(RunContext& ctx) const override {
    const Tensor& ind = ctx.input(0);
    const int64_t depth = depth_of(ctx.input(1));
    Tensor& out = ctx.output(0);
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(ind.rank()) + 1, ctx.node());
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= ind.dim(d);
    for (size_t d = static_cast<size_t>(axis); d < ind.rank(); ++d) inner *= ind.dim(d);
    std::vector<double> idx(static_cast<size_t>(ind.numel()));
    dispatch_numeric(ind.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (int64_t i = 0; i < ind.numel(); ++i)
        idx[i] = static_cast<double>(
            static_cast<typename Compute<T>::type>(static_cast<const T*>(ind.raw())[i]));
    });
    dispatch_any(out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* values = static_cast<const T*>(ctx.input(2).raw());
      T* dst = static_cast<T*>(out.raw());
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t d = 0; d < depth; ++d)
          for (int64_t i = 0; i < inner; ++i) {
            int64_t v = static_cast<int64_t>(idx[o * inner + i]);
            if (v < 0) v += depth;
            dst[(o * depth + d) * inner + i] = values[v == d ? 1 : 0];
          }
    });
  }

 private:
  static int64_t depth_of(const Tensor& t) {
    return dispatch_numeric(t.dtype(), [&](auto tag) -> int64_t {
      using T = typename decltype(tag)::type;
      return static_cast<int64_t>(
          static_cast<typename Compute<T>::type>(static_cast<const T*>(t.raw())[0]));
    });
  }
  int64_t axis_;
};

class Compress final : public Kernel {
 public:
  explicit Compress(const Node& n) : has_axis_(n.has_attr("axis")), axis_(n.attr_int("axis", 0)) {}
  void infer(InferContext& ctx) const override { ctx.set_output_unknown(0, ctx.dtype(0)); }
  void run(RunContext& ctx) const override {
    const Tensor& in = ctx.input(0);
    const Tensor& cond = ctx.input(1);
    const bool* c = cond.data<bool>();
    Tensor flat = has_axis_ ? in : in.reshaped({in.numel()});
    const int64_t axis =
        has_axis_ ? normalize_axis(axis_, static_cast<int64_t>(in.rank()), ctx.node()) : 0;
    std::vector<int64_t> keep;
    for (int64_t i = 0; i < std::min(cond.numel(), flat.dim(axis)); ++i)
      if (c[i]) keep.push_back(i);
    Shape os = flat.shape();
    os[axis] = static_cast<int64_t>(keep.size());
    Tensor& out = ctx.allocate_output(0, in.dtype(), os);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= flat.dim(d);
    for (size_t d = static_cast<size_t>(axis) + 1; d < flat.rank(); ++d) inner *= flat.dim(d);
    dispatch_any(in.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = static_cast<const T*>(flat.raw());
      T* dst = static_cast<T*>(out.raw());
      const int64_t n = flat.dim(axis), k = static_cast<int64_t>(keep.size());
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < k; ++j)
          std::copy(src + (o * n + keep[j]) * inner, src + (o * n + keep[j] + 1) * inner,
                    dst + (o * k + j) * inner);
    });
  }

 private:
  bool has_axis_;
  int64_t axis_;
};

class NonZero final : public Kernel {
 public:
  explicit NonZero(const Node&) {}
  void infer(InferContext& ctx) const override { ctx.set_output_unknown(0, DType::Int64); }
  void run(RunContext& ctx) const override {
    const Tensor& in = ctx.input(0);
    std::vector<int64_t> hits;
    dispatch_numeric(in.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* p = static_cast<const T*>(in.raw());
      for (int64_t i = 0; i < in.numel(); ++i)
        if (static_cast<typename Compute<T>::type>(p[i]) != 0) hits.push_back(i);
    });
    const int64_t r = std::max<int64_t>(static_cast<int64_t>(in.rank()), 1),
                  n = static_cast<int64_t>(hits.size());
    int64_t* out =
        ctx.allocate_output(0, DType::Int64, {static_cast<int64_t>(in.rank()), n}).data<int64_t>();
    (void)r;
    for (int64_t j = 0; j < n; ++j) {
      int64_t rem = hits[j];
      for (size_t d = in.rank(); d-- > 0;) {
        out[d * n + j] = rem % in.dim(d);
        rem /= in.dim(d);
      }
    }
  }
};

template <class C>
bool is_nan(const C& v) {
  if constexpr (std::is_floating_point_v<C>)
    return std::isnan(v);
  else
    return false;
}

// The order TopK and Unique sort (value, index) pairs in: by value (largest first, or
// smallest), NaNs after every number, ties (and NaNs among themselves) by the lower index: a
// strict weak order, which is what a stable sort by value alone gives.
template <class C>
auto value_then_index(bool largest) {
  return [largest](const std::pair<C, int64_t>& a, const std::pair<C, int64_t>& b) {
    const bool na = is_nan(a.first), nb = is_nan(b.first);
    if (na || nb) return na == nb ? a.second < b.second : nb;
    if (a.first != b.first) return largest ? a.first > b.first : a.first < b.first;
    return a.second < b.second;
  };
}

class TopK final : public Kernel {
 public:
  explicit TopK(const Node& n)
      : axis_(n.attr_int("axis", -1)),
        largest_(n.attr_int("largest", 1) != 0),
        sorted_(n.attr_int("sorted", 1) != 0),
        legacy_k_(n.opset < 10 ? n.attr_int("k") : -1) {}
  static int64_t k_of(const Tensor& t, const Node& node) {
    const auto v = to_int64_vector(t, node, "K");
    VOLT_CHECK(v.size() == 1, InvalidArgument,
               node.describe() + ": K must hold one value, not " + std::to_string(v.size()));
    return v[0];
  }
  void infer(InferContext& ctx) const override {
    int64_t k = legacy_k_;
    if (k < 0) {
      const Tensor* t = ctx.input_tensor(1);
      if (!t) {
        ctx.set_output_unknown(0, ctx.dtype(0));
        ctx.set_output_unknown(1, DType::Int64);
        return;
      }
      k = k_of(*t, ctx.node());
    }
    Shape s = ctx.shape(0);
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(s.size()), ctx.node());
    VOLT_CHECK(k >= 0 && k <= s[axis], InvalidArgument,
               ctx.node().describe() + ": K=" + std::to_string(k) +
                   " is out of range for axis of size " + std::to_string(s[axis]));
    s[axis] = k;
    ctx.set_output(0, ctx.dtype(0), s);
    ctx.set_output(1, DType::Int64, s);
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(x.rank()), ctx.node());
    const int64_t k = legacy_k_ >= 0 ? legacy_k_ : k_of(ctx.input(1), ctx.node());
    const int64_t n = x.dim(axis);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
    for (size_t d = static_cast<size_t>(axis) + 1; d < x.rank(); ++d) inner *= x.dim(d);
    int64_t* oi = ctx.output(1).data<int64_t>();
    dispatch_numeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = typename Compute<T>::type;
      const T* px = static_cast<const T*>(x.raw());
      T* ov = static_cast<T*>(ctx.output(0).raw());
      // One row at a time, its values copied next to their indices: the k first in the order
      // (value, then the lower index first, as the spec asks for ties; NaNs after every number,
      // as the ONNX reference's sort puts them) are selected, then sorted, which is what a
      // stable sort's first k are, in O(n + k log k).
      const auto before = value_then_index<C>(largest_);
      parallel_for(
          outer * inner, outer * inner > 1 && outer * inner * n >= 32768, [&](int64_t row) {
            const int64_t o = row / inner, i = row % inner;
            thread_local std::vector<std::pair<C, int64_t>> items;
            auto value = [&](int64_t j) { return static_cast<C>(px[(o * n + j) * inner + i]); };
            if (k > 0 && k * 8 <= n) {
              // Few of many (a detector's best 100 of 100000 scores): a heap of the k kept,
              // its top the one that comes last; most values lose to it in one comparison.
              items.resize(static_cast<size_t>(k));
              for (int64_t j = 0; j < k; ++j) items[static_cast<size_t>(j)] = {value(j), j};
              std::make_heap(items.begin(), items.end(), before);
              C worst = items.front().first;
              for (int64_t j = k; j < n; ++j) {
                const C v = value(j);
                if (largest_ ? v < worst : v > worst) continue;  // (false for NaNs: see below)
                const std::pair<C, int64_t> candidate{v, j};
                if (!before(candidate, items.front())) continue;
                std::pop_heap(items.begin(), items.end(), before);
                items.back() = candidate;
                std::push_heap(items.begin(), items.end(), before);
                worst = items.front().first;
              }
            } else {
              items.resize(static_cast<size_t>(n));
              for (int64_t j = 0; j < n; ++j) items[static_cast<size_t>(j)] = {value(j), j};
              if (k < n) std::nth_element(items.begin(), items.begin() + k, items.end(), before);
            }
            std::sort(items.begin(), items.begin() + k, before);
            for (int64_t j = 0; j < k; ++j) {
              const int64_t from = items[static_cast<size_t>(j)].second;
              ov[(o * k + j) * inner + i] = px[(o * n + from) * inner + i];
              oi[(o * k + j) * inner + i] = from;
            }
          });
    });
    (void)sorted_;
  }

 private:
  int64_t axis_;
  bool largest_, sorted_;
  int64_t legacy_k_;
};

class Unique final : public Kernel {
 public:
  explicit Unique(const Node& n)
      : sorted_(n.attr_int("sorted", 1) != 0),
        has_axis_(n.has_attr("axis")),
        axis_(n.attr_int("axis", 0)) {}
  void infer(InferContext& ctx) const override {
    ctx.set_output_unknown(0, ctx.dtype(0));
    for (size_t i = 1; i < 4; ++i) ctx.set_output_unknown(i, DType::Int64);
  }
  void run(RunContext& ctx) const override {
    const Tensor& x0 = ctx.input(0);
    const Tensor x = has_axis_ ? x0 : x0.reshaped({x0.numel()});
    const int64_t axis =
        has_axis_ ? normalize_axis(axis_, static_cast<int64_t>(x.rank()), ctx.node()) : 0;
    const int64_t n = x.dim(axis);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
    for (size_t d = static_cast<size_t>(axis) + 1; d < x.rank(); ++d) inner *= x.dim(d);
    dispatch_any(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* p = static_cast<const T*>(x.raw());
      // Slices along the axis compared lexicographically in place, NaNs after every number
      // and equal to each other (so that sorting sees a total order and NaNs collapse).
      using C = std::conditional_t<std::is_same_v<T, std::string>, T, typename Compute<T>::type>;
      auto at = [&](int64_t j, int64_t o, int64_t i) -> C {
        if constexpr (std::is_same_v<T, std::string>)
          return p[(o * n + j) * inner + i];
        else
          return static_cast<C>(p[(o * n + j) * inner + i]);
      };
      // -1, 0 or 1: slice a against slice b.
      auto compare = [&](int64_t a, int64_t b) {
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i) {
            const C u = at(a, o, i), v = at(b, o, i);
            const bool nu = is_nan(u), nv = is_nan(v);
            if (nu || nv) {
              if (nu != nv) return nu ? 1 : -1;
              continue;
            }
            if (u < v) return -1;
            if (v < u) return 1;
          }
        return 0;
      };
      // Sorted by slice, equal slices by index: runs of equal slices, each starting at its
      // first occurrence.
      std::vector<int64_t> by_value(static_cast<size_t>(n));
      std::iota(by_value.begin(), by_value.end(), 0);
      if constexpr (std::is_arithmetic_v<C>) {
        if (outer * inner == 1) {  // single elements: sorted as (value, index) pairs, in cache
          std::vector<std::pair<C, int64_t>> items(static_cast<size_t>(n));
          for (int64_t j = 0; j < n; ++j) items[static_cast<size_t>(j)] = {at(j, 0, 0), j};
          std::sort(items.begin(), items.end(), value_then_index<C>(false));
          for (int64_t j = 0; j < n; ++j)
            by_value[static_cast<size_t>(j)] = items[static_cast<size_t>(j)].second;
        }
      }
      if (outer * inner != 1 || !std::is_arithmetic_v<C>)
        std::sort(by_value.begin(), by_value.end(), [&](int64_t a, int64_t b) {
          const int c = compare(a, b);
          return c != 0 ? c < 0 : a < b;
        });
      std::vector<int64_t> first, counts, group_of(static_cast<size_t>(n));
      for (size_t k = 0; k < by_value.size(); ++k) {
        const int64_t j = by_value[k];
        if (k == 0 || compare(by_value[k - 1], j) != 0) {
          first.push_back(j);
          counts.push_back(0);
        }
        group_of[static_cast<size_t>(j)] = static_cast<int64_t>(first.size()) - 1;
        ++counts.back();
      }
      // The output order: by value (sorted), or by first occurrence.
      std::vector<size_t> order(first.size());
      std::iota(order.begin(), order.end(), 0);
      if (!sorted_)
        std::sort(order.begin(), order.end(),
                  [&](size_t a, size_t b) { return first[a] < first[b]; });
      std::vector<int64_t> rank_of(order.size());
      for (size_t r = 0; r < order.size(); ++r) rank_of[order[r]] = static_cast<int64_t>(r);
      const int64_t m = static_cast<int64_t>(first.size());
      Shape ys = x.shape();
      ys[axis] = m;
      T* y = static_cast<T*>(ctx.allocate_output(0, x.dtype(), ys).raw());
      for (int64_t r = 0; r < m; ++r) {
        const int64_t j = first[order[static_cast<size_t>(r)]];
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t i = 0; i < inner; ++i)
            y[(o * m + r) * inner + i] = p[(o * n + j) * inner + i];
      }
      if (ctx.has_output(1)) {
        int64_t* f = ctx.allocate_output(1, DType::Int64, {m}).data<int64_t>();
        for (int64_t r = 0; r < m; ++r) f[r] = first[order[static_cast<size_t>(r)]];
      }
      if (ctx.has_output(2)) {
        int64_t* inv = ctx.allocate_output(2, DType::Int64, {n}).data<int64_t>();
        for (int64_t j = 0; j < n; ++j) inv[j] = rank_of[static_cast<size_t>(group_of[j])];
      }
      if (ctx.has_output(3)) {
        int64_t* c = ctx.allocate_output(3, DType::Int64, {m}).data<int64_t>();
        for (int64_t r = 0; r < m; ++r) c[r] = counts[order[static_cast<size_t>(r)]];
      }
    });
  }

 private:
  bool sorted_, has_axis_;
  int64_t axis_;
};

}  // namespace

VOLT_REGISTER_KERNEL(gather_elements,
                     {.op = "GatherElements", .since = 11, .create = make_kernel<GatherElements>});
VOLT_REGISTER_KERNEL(gather_nd, {.op = "GatherND", .since = 11, .create = make_kernel<GatherND>});
VOLT_REGISTER_KERNEL(scatter_elements, {.op = "ScatterElements",
                                        .since = 11,
                                        .create = make_kernel<ScatterElements>});
VOLT_REGISTER_KERNEL(
    scatter, {.op = "Scatter", .since = 9, .until = 10, .create = make_kernel<ScatterElements>});
VOLT_REGISTER_KERNEL(scatter_nd,
                     {.op = "ScatterND", .since = 11, .create = make_kernel<ScatterND>});
VOLT_REGISTER_KERNEL(one_hot, {.op = "OneHot", .since = 9, .create = make_kernel<OneHot>});
VOLT_REGISTER_KERNEL(compress, {.op = "Compress", .since = 9, .create = make_kernel<Compress>});
VOLT_REGISTER_KERNEL(non_zero, {.op = "NonZero", .since = 9, .create = make_kernel<NonZero>});
VOLT_REGISTER_KERNEL(top_k, {.op = "TopK", .create = make_kernel<TopK>});
VOLT_REGISTER_KERNEL(unique, {.op = "Unique", .since = 11, .create = make_kernel<Unique>});

}  // namespace volt
