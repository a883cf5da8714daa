// Reductions (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceSumSquare,
// ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp) and ArgMax/ArgMin. Axes come from an
// attribute before opset 13 (ReduceSum) or 18 (the others) and from input 1 after.
#include <algorithm>
#include <cmath>
#include <limits>

#include "operators/common/convert.hpp"
#include "operators/common/dispatch.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/reduction.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/common/simd_clones.hpp"
#include "operators/common/vector_exp.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

// y[i] = (Σ_r x[r * n + i]) / divisor for i in [0, n), summed in double in the order of r.
VOLT_SIMD_CLONES void sum_rows_f32(const float* x, int64_t rows, int64_t n, double divisor,
                                   double* acc, float* y) {
  std::fill(acc, acc + n, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < n; ++i) acc[i] += static_cast<double>(x[r * n + i]);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(acc[i] / divisor);
}

// Σ x[0, n) in double, as eight interleaved partial sums (x[i] goes to sum i % 8) added
// pairwise at the end: a reduction over trailing axes (ReduceMean over H and W written for a
// global average pool) sums each output's contiguous run in vector lanes, where a single
// accumulator waits on each add in turn (1280 runs of 49: 0.33 ms against a few us).
VOLT_SIMD_CLONES double sum_contiguous_f32(const float* x, int64_t n) {
  double part[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
#pragma omp simd
    for (int k = 0; k < 8; ++k) part[k] += static_cast<double>(x[i + k]);
  for (int k = 0; i < n; ++i, ++k) part[k] += static_cast<double>(x[i]);
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

// Σ exp(x[i] - shift) over x[0, n) in double, shift being the run's maximum (every term is at
// most 1): each term by vector_exp, in 16 float lanes over blocks of 1024 (at most 64 terms a
// lane: 6e-6 relative at worst, far less in practice), the blocks' sums added in double.
VOLT_SIMD_CLONES double sum_exp_shifted_f32(const float* x, int64_t n, float shift) {
  double total = 0;
  for (int64_t b = 0; b < n; b += 1024) {
    const int64_t e = std::min(n, b + 1024);
    float part[16] = {};
    int64_t i = b;
    for (; i + 16 <= e; i += 16)
#pragma omp simd
      for (int k = 0; k < 16; ++k) part[k] += vector_exp(x[i + k] - shift);
    for (int k = 0; i < e; ++i, ++k) part[k] += vector_exp(x[i] - shift);
    double block = 0;
    for (float v : part) block += static_cast<double>(v);
    total += block;
  }
  return total;
}

// Offsets of every output element's first input element, and of every reduced position
// relative to it.
void reduce_offsets(const Shape& in, const std::vector<char>& reduced, std::vector<int64_t>& base,
                    std::vector<int64_t>& inner) {
  const auto strides = strides_of(in);
  base.assign(1, 0);
  inner.assign(1, 0);
  for (size_t d = 0; d < in.size(); ++d) {
    std::vector<int64_t>& v = reduced[d] ? inner : base;
    std::vector<int64_t> next;
    next.reserve(v.size() * static_cast<size_t>(in[d]));
    for (int64_t o : v)
      for (int64_t i = 0; i < in[d]; ++i) next.push_back(o + i * strides[d]);
    v = std::move(next);
  }
}

class Reduce final : public Kernel {
 public:
  Reduce(const Node& n, Reduction r, int axes_input_since) : r_(r), attrs_(n, axes_input_since) {}

  void infer(InferContext& ctx) const override {
    std::vector<int64_t> axes;
    if (!attrs_.axes.read(ctx.has_input(1) ? ctx.input_tensor(1) : nullptr, ctx.has_input(1),
                          ctx.node(), axes))
      return ctx.set_output_unknown(0, ctx.dtype(0));
    const ReducePlan p =
        plan_reduce(ctx.shape(0), axes, attrs_.keepdims, attrs_.noop_with_empty_axes, ctx.node());
    ctx.set_output(0, ctx.dtype(0), p.out);
  }

  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    std::vector<int64_t> axes;
    attrs_.axes.read(ctx.has_input(1) ? &ctx.input(1) : nullptr, ctx.has_input(1), ctx.node(),
                     axes);
    const ReducePlan p =
        plan_reduce(x.shape(), axes, attrs_.keepdims, attrs_.noop_with_empty_axes, ctx.node());
    Tensor& y = ctx.output(0);
    if (p.identity) {
      std::memcpy(y.raw(), x.raw(), x.nbytes());
      return;
    }
    if (sum_block_f32(x, p, y) || extreme_block_f32(x, p, y) || log_sum_exp_block_f32(x, p, y))
      return;
    std::vector<int64_t> base, inner;
    reduce_offsets(x.shape(), p.reduced, base, inner);
    if (x.numel() == 0) inner.clear();
    dispatch_numeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, bool>) {
        ctx.error("does not apply to bool");
      } else {
        using C = typename Compute<T>::type;
        // Sums of floats accumulate in double; integers in their own type.
        using Acc = std::conditional_t<std::is_floating_point_v<C>, double, C>;
        const T* px = static_cast<const T*>(x.raw());
        T* py = static_cast<T*>(y.raw());
        const int64_t n_out = static_cast<int64_t>(base.size());
        parallel_for(n_out, n_out * static_cast<int64_t>(inner.size()) > 65536, [&](int64_t o) {
          py[o] = static_cast<T>(static_cast<C>(reduce_one<T, Acc>(px + base[o], inner)));
        });
      }
    });
  }

 private:
  // The common case of training graphs, pooled embeddings and global pools: a float Sum or Mean
  // over one block of adjacent axes, x seen as [outer, R, inner]. Rows are added as vectors (the
  // generic path's sums: double, in the same order); where the block is the last axes
  // (inner = 1), each output's run is summed in vector lanes (sum_contiguous_f32). False where it
  // does not apply.
  // x as [outer, count, inner] where the reduced axes are one block of adjacent axes; false
  // otherwise.
  static bool reduced_block(const Shape& s, const ReducePlan& p, int64_t& outer, int64_t& count,
                            int64_t& inner) {
    size_t first = s.size(), last = 0;
    for (size_t d = 0; d < s.size(); ++d)
      if (p.reduced[d]) {
        first = std::min(first, d);
        last = d;
      }
    if (first == s.size()) return false;
    for (size_t d = first; d <= last; ++d)
      if (!p.reduced[d]) return false;
    outer = count = inner = 1;
    for (size_t d = 0; d < s.size(); ++d) (d < first ? outer : d <= last ? count : inner) *= s[d];
    return true;
  }

  // Max and Min of f32 over one block, as the general loop computes them (NaNs skipped):
  // contiguous runs in eight lanes, or rows of columns.
  bool extreme_block_f32(const Tensor& x, const ReducePlan& p, Tensor& y) const {
    const bool max = r_ == Reduction::Max;
    int64_t outer, count, inner;
    if (x.dtype() != DType::Float || (!max && r_ != Reduction::Min) || x.numel() == 0 ||
        !reduced_block(x.shape(), p, outer, count, inner))
      return false;
    const float* px = x.data<float>();
    float* py = y.data<float>();
    const float start =
        max ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
    auto pick = [max](float v, float m) { return max ? (v > m ? v : m) : (v < m ? v : m); };
    if (inner == 1) {
      parallel_chunks(outer, std::max<int64_t>(1, 65536 / count), [&](int64_t lo, int64_t hi) {
        for (int64_t o = lo; o < hi; ++o) {
          py[o] = extreme_of_run(px + o * count, count, start, pick);
        }
      });
      return true;
    }
    parallel_chunks(outer, std::max<int64_t>(1, 65536 / std::max<int64_t>(count * inner, 1)),
                    [&](int64_t lo, int64_t hi) {
                      for (int64_t o = lo; o < hi; ++o) {
                        float* out = py + o * inner;
                        std::fill(out, out + inner, start);
                        for (int64_t r = 0; r < count; ++r) {
                          const float* row = px + (o * count + r) * inner;
                          for (int64_t i = 0; i < inner; ++i) out[i] = pick(row[i], out[i]);
                        }
                      }
                    });
    return true;
  }

  bool sum_block_f32(const Tensor& x, const ReducePlan& p, Tensor& y) const {
    int64_t outer, count, inner;
    if (x.dtype() != DType::Float || (r_ != Reduction::Sum && r_ != Reduction::Mean) ||
        x.numel() == 0 || !reduced_block(x.shape(), p, outer, count, inner))
      return false;
    const double divisor = r_ == Reduction::Mean ? static_cast<double>(count) : 1.0;
    const float* px = x.data<float>();
    float* py = y.data<float>();
    if (inner == 1) {
      parallel_chunks(outer, std::max<int64_t>(1, 65536 / count), [&](int64_t lo, int64_t hi) {
        for (int64_t o = lo; o < hi; ++o)
          py[o] = static_cast<float>(sum_contiguous_f32(px + o * count, count) / divisor);
      });
      return true;
    }
    // Rows of `outer` in blocks, one accumulator per block.
    parallel_chunks(outer, std::max<int64_t>(1, 65536 / std::max<int64_t>(count * inner, 1)),
                    [&](int64_t lo, int64_t hi) {
                      std::vector<double> acc(static_cast<size_t>(inner));
                      for (int64_t o = lo; o < hi; ++o)
                        sum_rows_f32(px + o * count * inner, count, inner, divisor, acc.data(),
                                     py + o * inner);
                    });
    return true;
  }

  // LogSumExp of f32 over the last axes (a CTC or language model's scores, torch.logsumexp):
  // each run's maximum in eight lanes, then its shifted exponentials (sum_exp_shifted_f32). The
  // general loop took std::exp in double per element, 4 ns each ([64, 32000]: 8.0 ms against
  // ONNX Runtime's 6.0). A run whose maximum is not finite (an infinity, or NaN everywhere)
  // takes the general loop's arithmetic, so that both give the same NaN or infinity.
  bool log_sum_exp_block_f32(const Tensor& x, const ReducePlan& p, Tensor& y) const {
    int64_t outer, count, inner;
    if (x.dtype() != DType::Float || r_ != Reduction::LogSumExp || x.numel() == 0 ||
        !reduced_block(x.shape(), p, outer, count, inner) || inner != 1)
      return false;
    const float* px = x.data<float>();
    float* py = y.data<float>();
    parallel_chunks(outer, std::max<int64_t>(1, 16384 / count), [&](int64_t lo, int64_t hi) {
      std::vector<int64_t> positions;
      for (int64_t o = lo; o < hi; ++o) {
        const float* run = px + o * count;
        const float m = extreme_of_run(run, count, -std::numeric_limits<float>::infinity(),
                                       [](float v, float m) { return v > m ? v : m; });
        if (std::isfinite(m)) {
          py[o] = static_cast<float>(static_cast<double>(m) +
                                     std::log(sum_exp_shifted_f32(run, count, m)));
          continue;
        }
        if (positions.empty())
          for (int64_t j = 0; j < count; ++j) positions.push_back(j);
        py[o] = static_cast<float>(reduce_one<float, double>(run, positions));
      }
    });
    return true;
  }

  // Integer sums and products wrap, as numpy's do (signed overflow is undefined in C++).
  template <class A>
  static A wrapping_add(A a, A b) {
    if constexpr (std::is_integral_v<A>)
      return static_cast<A>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    else
      return a + b;
  }
  template <class A>
  static A wrapping_mul(A a, A b) {
    if constexpr (std::is_integral_v<A>)
      return static_cast<A>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    else
      return a * b;
  }
  // Logarithms and roots of integers go through convert(): -inf (an empty LogSumExp, the log of
  // a zero sum) becomes 0 rather than an undefined conversion.
  template <class T, class Acc>
  Acc reduce_one(const T* p, const std::vector<int64_t>& inner) const {
    using C = typename Compute<T>::type;
    auto v = [&](int64_t i) { return static_cast<Acc>(static_cast<C>(p[i])); };
    const size_t n = inner.size();
    switch (r_) {
      case Reduction::Max: {
        Acc m = std::numeric_limits<Acc>::has_infinity ? -std::numeric_limits<Acc>::infinity()
                                                       : std::numeric_limits<Acc>::lowest();
        for (int64_t i : inner) m = std::max(m, v(i));
        return m;
      }
      case Reduction::Min: {
        Acc m = std::numeric_limits<Acc>::has_infinity ? std::numeric_limits<Acc>::infinity()
                                                       : std::numeric_limits<Acc>::max();
        for (int64_t i : inner) m = std::min(m, v(i));
        return m;
      }
      case Reduction::Prod: {
        Acc m = 1;
        for (int64_t i : inner) m = wrapping_mul(m, v(i));
        return m;
      }
      case Reduction::LogSumExp: {
        if (n == 0) return convert<double, Acc>(-std::numeric_limits<double>::infinity());
        Acc mx = v(inner[0]);
        for (int64_t i : inner) mx = std::max(mx, v(i));
        double s = 0;
        for (int64_t i : inner) s += std::exp(static_cast<double>(v(i)) - static_cast<double>(mx));
        return convert<double, Acc>(static_cast<double>(mx) + std::log(s));
      }
      default:
        break;
    }
    Acc s = 0;
    for (int64_t i : inner) {
      const Acc x = v(i);
      if (r_ == Reduction::SumSquare || r_ == Reduction::L2)
        s = wrapping_add(s, wrapping_mul(x, x));
      else if (r_ == Reduction::L1)
        s = wrapping_add(s, x < 0 ? wrapping_mul(x, Acc(-1)) : x);
      else
        s = wrapping_add(s, x);
    }
    switch (r_) {
      case Reduction::Mean:
        return n ? static_cast<Acc>(s / static_cast<Acc>(n)) : s;
      case Reduction::L2:
        return convert<double, Acc>(std::sqrt(static_cast<double>(s)));
      case Reduction::LogSum:
        return convert<double, Acc>(std::log(static_cast<double>(s)));
      default:
        return s;
    }
  }

  Reduction r_;
  ReduceAttributes attrs_;
};

class ArgReduce final : public Kernel {
 public:
  ArgReduce(const Node& n, bool max)
      : max_(max),
        axis_(n.attr_int("axis", 0)),
        keepdims_(n.attr_int("keepdims", 1) != 0),
        last_(n.attr_int("select_last_index", 0) != 0) {}
  void infer(InferContext& ctx) const override {
    const int64_t axis =
        normalize_axis(axis_, static_cast<int64_t>(ctx.shape(0).size()), ctx.node());
    ctx.set_output(0, DType::Int64,
                   plan_reduce(ctx.shape(0), {axis}, keepdims_, false, ctx.node()).out);
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(x.rank()), ctx.node());
    VOLT_CHECK(x.dim(axis) > 0, InvalidArgument,
               ctx.node().describe() + ": cannot take the arg of an empty axis");
    // x as [outer, n, inner]: each piece of up to kColumns columns of one outer index walks
    // the n rows once, keeping the best value and index per column (contiguous loads; the
    // general offsets walked each column with stride `inner`).
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
    for (int64_t d = axis + 1; d < static_cast<int64_t>(x.rank()); ++d) inner *= x.dim(d);
    const int64_t n = x.dim(axis);
    int64_t* py = ctx.output(0).data<int64_t>();
    if (outer * inner == 0) return;
    dispatch_numeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = typename Compute<T>::type;
      const T* px = static_cast<const T*>(x.raw());
      auto better = [&](C v, C bv) {
        return max_ ? (last_ ? v >= bv : v > bv) : (last_ ? v <= bv : v < bv);
      };
      constexpr int64_t kColumns = 256;
      const int64_t pieces = (inner + kColumns - 1) / kColumns;
      parallel_for(outer * pieces, outer * pieces > 1 && x.numel() > 32768, [&](int64_t t) {
        const int64_t o = t / pieces, c0 = t % pieces * kColumns,
                      w = std::min(kColumns, inner - c0);
        const T* first = px + o * n * inner + c0;
        int64_t* out = py + o * inner + c0;
        if (w == 1) {  // along the last axis: one scan
          C bv = static_cast<C>(first[0]);
          int64_t best = 0;
          for (int64_t j = 1; j < n; ++j) {
            const C v = static_cast<C>(first[j * inner]);
            if (better(v, bv)) bv = v, best = j;
          }
          out[0] = best;
          return;
        }
        C bv[kColumns];
        for (int64_t i = 0; i < w; ++i) bv[i] = static_cast<C>(first[i]), out[i] = 0;
        for (int64_t j = 1; j < n; ++j) {
          const T* row = first + j * inner;
          for (int64_t i = 0; i < w; ++i) {
            const C v = static_cast<C>(row[i]);
            const bool b = better(v, bv[i]);
            bv[i] = b ? v : bv[i];
            out[i] = b ? j : out[i];
          }
        }
      });
    });
  }

 private:
  bool max_;
  int64_t axis_;
  bool keepdims_, last_;
};

// One kernel per entry of kReduceOps, named after its op.
struct RegisterReductions {
  RegisterReductions() {
    for (const ReduceOpInfo& r : kReduceOps)
      KernelRegistry::instance().add(
          {.name = r.op, .op = r.op, .types = kNumericTypes, .create = [r](const Node& n) {
             return std::make_unique<Reduce>(n, r.reduction, r.axes_input_since);
           }});
  }
} g_register_reductions;

}  // namespace

VOLT_REGISTER_KERNEL(arg_max, {.op = "ArgMax", .types = kNumericTypes, .create = [](const Node& n) {
                                 return std::make_unique<ArgReduce>(n, true);
                               }});
VOLT_REGISTER_KERNEL(arg_min, {.op = "ArgMin", .types = kNumericTypes, .create = [](const Node& n) {
                                 return std::make_unique<ArgReduce>(n, false);
                               }});

}  // namespace volt
