// Softmax, LogSoftmax and Hardmax. Before opset 13 they work on the input coerced to 2-D at
// `axis` (default 1); from 13 on, along the single `axis` (default -1). Both forms become one
// canonical [outer, n, inner] problem here. f32 runs on volt's vectorized loops: along the
// innermost axis by rows, along other axes by columns of each [n, inner] plane.
#include <algorithm>
#include <cmath>
#include <limits>

#include "operators/common/dispatch.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/reduction.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/common/simd_clones.hpp"
#include "operators/common/vector_exp.hpp"
#include "operators/cpu/softmax_rows.hpp"
#include "operators/registry.hpp"

namespace volt {

namespace {
// e^(x - max x) of a row of n floats into y (x may be y); returns their sum. The maximum and the
// sum are SIMD reductions (summed in lanes, so in another order than a plain loop: a difference
// in the last bits).
[[gnu::always_inline]] inline float exp_row(const float* x, float* y, int64_t n) {
  float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t i = 0; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) {
    y[i] = vector_exp(x[i] - mx);
    sum += y[i];
  }
  return sum;
}
}  // namespace

// (See softmax_rows.hpp.)
VOLT_SIMD_CLONES void softmax_rows_f32(const float* x, float* y, int64_t rows, int64_t n,
                                       bool log) {
  for (int64_t r = 0; r < rows; ++r, x += n, y += n) {
    if (log) {
      float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
      for (int64_t i = 0; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t i = 0; i < n; ++i) sum += vector_exp(x[i] - mx);
      const float shift = mx + std::log(sum);
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] - shift;
    } else {
      const float inv = 1.0f / exp_row(x, y, n);
      for (int64_t i = 0; i < n; ++i) y[i] *= inv;
    }
  }
}

VOLT_SIMD_CLONES void exp_rows_f32(float* x, int64_t rows, int64_t n, int64_t ld, float* inv_sums) {
  for (int64_t r = 0; r < rows; ++r, x += ld) inv_sums[r] = 1.0f / exp_row(x, x, n);
}

namespace {

// The same along a strided axis: columns [c0, c1) of one [n, inner] plane, the maximum, the
// sum and the scaling each a pass over the plane's rows vectorized across the columns (a
// segmentation head's softmax over its classes, axis 1 of N x C x H x W). `mx` and `sum` hold
// c1 - c0 floats.
VOLT_SIMD_CLONES void softmax_columns_f32(const float* x, float* y, int64_t n, int64_t inner,
                                          int64_t c0, int64_t c1, bool log, float* mx, float* sum) {
  const int64_t w = c1 - c0;
  x += c0;
  y += c0;
  for (int64_t c = 0; c < w; ++c) mx[c] = -std::numeric_limits<float>::infinity(), sum[c] = 0;
  for (int64_t j = 0; j < n; ++j) {
    const float* row = x + j * inner;
#pragma omp simd
    for (int64_t c = 0; c < w; ++c) mx[c] = row[c] > mx[c] ? row[c] : mx[c];
  }
  for (int64_t j = 0; j < n; ++j) {
    const float* row = x + j * inner;
    float* out = y + j * inner;
#pragma omp simd
    for (int64_t c = 0; c < w; ++c) {
      const float e = vector_exp(row[c] - mx[c]);
      if (!log) out[c] = e;
      sum[c] += e;
    }
  }
  if (log) {
    for (int64_t c = 0; c < w; ++c) mx[c] += std::log(sum[c]);
    for (int64_t j = 0; j < n; ++j) {
      const float* row = x + j * inner;
      float* out = y + j * inner;
#pragma omp simd
      for (int64_t c = 0; c < w; ++c) out[c] = row[c] - mx[c];
    }
    return;
  }
  for (int64_t c = 0; c < w; ++c) sum[c] = 1.0f / sum[c];
  for (int64_t j = 0; j < n; ++j) {
    float* out = y + j * inner;
#pragma omp simd
    for (int64_t c = 0; c < w; ++c) out[c] *= sum[c];
  }
}

enum class SoftmaxKind { Softmax, LogSoftmax, Hardmax };

struct Extent {
  int64_t outer = 1, n = 1, inner = 1;
};

class Softmax final : public Kernel {
 public:
  Softmax(const Node& n, SoftmaxKind kind)
      : kind_(kind), coerced_(n.opset < 13), axis_(n.attr_int("axis", n.opset < 13 ? 1 : -1)) {}

  // f32 Softmax and LogSoftmax run on volt's vectorized loops along any axis: no code generated
  // per shape (oneDNN's primitive costs 50-80 us at each new shape, and along an outer axis
  // its plain-layout kernel was 17x slower than ONNX Runtime), and one kernel for every plan, so
  // that a plan made for one of several shapes and the plan later specialized to that shape
  // give the same bits.
  void infer(InferContext& ctx) const override {
    const Shape& x = ctx.shape(0);
    (void)extent(x, ctx.node());  // (checks the axis)
    ctx.set_output(0, ctx.dtype(0), x);
  }

  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Extent e = extent(x.shape(), ctx.node());
    if (x.dtype() == DType::Float && e.inner == 1 && kind_ != SoftmaxKind::Hardmax) {
      const auto* px = static_cast<const float*>(x.raw());
      auto* py = static_cast<float*>(ctx.output(0).raw());
      const bool log = kind_ == SoftmaxKind::LogSoftmax;
      // Rows in chunks of about 16K elements per task.
      const int64_t rows_per_task = std::max<int64_t>(1, 16384 / std::max<int64_t>(e.n, 1));
      parallel_chunks(e.outer, rows_per_task, [&](int64_t lo, int64_t hi) {
        softmax_rows_f32(px + lo * e.n, py + lo * e.n, hi - lo, e.n, log);
      });
      return;
    }
    if (x.dtype() == DType::Float && e.inner == 1 && kind_ == SoftmaxKind::Hardmax) {
      // Rows of f32: the row's maximum in lanes, then its first position (the reference loop's
      // choice: the first of equal maxima, NaNs never, position 0 for a row without a number
      // above -inf), the row zeroed and that position set. The loop took 2.3 ms on [64, 32000].
      const auto* px = static_cast<const float*>(x.raw());
      auto* py = static_cast<float*>(ctx.output(0).raw());
      const float lowest = -std::numeric_limits<float>::infinity();
      parallel_chunks(e.outer, std::max<int64_t>(1, 16384 / std::max<int64_t>(e.n, 1)),
                      [&](int64_t lo, int64_t hi) {
                        for (int64_t o = lo; o < hi; ++o) {
                          const float* row = px + o * e.n;
                          const float m = extreme_of_run(
                              row, e.n, lowest, [](float v, float m) { return v > m ? v : m; });
                          const int64_t arg =
                              m > lowest ? std::find(row, row + e.n, m) - row : int64_t{0};
                          std::fill(py + o * e.n, py + (o + 1) * e.n, 0.0f);
                          if (e.n > 0) py[o * e.n + arg] = 1.0f;
                        }
                      });
      return;
    }
    if (x.dtype() == DType::Float && kind_ != SoftmaxKind::Hardmax) {
      const auto* px = static_cast<const float*>(x.raw());
      auto* py = static_cast<float*>(ctx.output(0).raw());
      const bool log = kind_ == SoftmaxKind::LogSoftmax;
      // Tasks of one plane's columns, kColumns at a time (their maxima and sums on the stack).
      constexpr int64_t kColumns = 512;
      const int64_t per_plane = (e.inner + kColumns - 1) / kColumns;
      parallel_for(e.outer * per_plane, e.outer * e.n * e.inner > 16384, [&](int64_t t) {
        const int64_t o = t / per_plane, c0 = t % per_plane * kColumns;
        float mx[kColumns], sum[kColumns];
        softmax_columns_f32(px + o * e.n * e.inner, py + o * e.n * e.inner, e.n, e.inner, c0,
                            std::min(e.inner, c0 + kColumns), log, mx, sum);
      });
      return;
    }
    dispatch_numeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!std::is_floating_point_v<typename Compute<T>::type>) {
        ctx.error("needs floating-point input");
      } else {
        reference<T>(e, static_cast<const T*>(x.raw()), static_cast<T*>(ctx.output(0).raw()));
      }
    });
  }

 private:
  Extent extent(const Shape& x, const Node& node) const {
    const int64_t rank = static_cast<int64_t>(x.size());
    Extent e;
    if (rank == 0) return e;
    if (coerced_) {
      const int64_t axis = normalize_axis(axis_, rank, node, true);
      for (int64_t i = 0; i < rank; ++i) (i < axis ? e.outer : e.n) *= x[i];
      return e;
    }
    const int64_t axis = normalize_axis(axis_, rank, node);
    for (int64_t i = 0; i < rank; ++i) {
      if (i < axis)
        e.outer *= x[i];
      else if (i == axis)
        e.n = x[i];
      else
        e.inner *= x[i];
    }
    return e;
  }

  template <class T>
  void reference(const Extent& e, const T* x, T* y) const {
    using C = typename Compute<T>::type;
    parallel_for(e.outer * e.inner, e.outer * e.inner > 64, [&](int64_t oi) {
      const int64_t o = oi / e.inner, in = oi % e.inner;
      const int64_t base = o * e.n * e.inner + in;
      auto at = [&](int64_t j) { return static_cast<C>(x[base + j * e.inner]); };
      C mx = -std::numeric_limits<C>::infinity();
      int64_t arg = 0;
      for (int64_t j = 0; j < e.n; ++j)
        if (at(j) > mx) {
          mx = at(j);
          arg = j;
        }
      if (kind_ == SoftmaxKind::Hardmax) {
        for (int64_t j = 0; j < e.n; ++j)
          y[base + j * e.inner] = static_cast<T>(C(j == arg ? 1 : 0));
        return;
      }
      C sum = 0;
      for (int64_t j = 0; j < e.n; ++j) sum += std::exp(at(j) - mx);
      for (int64_t j = 0; j < e.n; ++j)
        y[base + j * e.inner] =
            static_cast<T>(kind_ == SoftmaxKind::Softmax ? std::exp(at(j) - mx) / sum
                                                         : at(j) - mx - std::log(sum));
    });
  }

  SoftmaxKind kind_;
  bool coerced_;
  int64_t axis_;
};

KernelDef softmax(const char* op, SoftmaxKind kind) {
  return {.op = op, .types = kFloatTypes, .create = [=](const Node& n) {
            return std::make_unique<Softmax>(n, kind);
          }};
}

}  // namespace

VOLT_REGISTER_KERNEL(softmax, softmax("Softmax", SoftmaxKind::Softmax));
VOLT_REGISTER_KERNEL(log_softmax, softmax("LogSoftmax", SoftmaxKind::LogSoftmax));
VOLT_REGISTER_KERNEL(hardmax, softmax("Hardmax", SoftmaxKind::Hardmax));

}  // namespace volt
