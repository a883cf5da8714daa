// LayerNormalization (a vectorized loop for f32 when only Y is asked for), GroupNormalization and
// InstanceNormalization (one loop over groups of channels), MeanVarianceNormalization and LRN.
#include <algorithm>
#include <cmath>

#include "operators/common/dispatch.hpp"
#include "operators/common/float_vectors.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/common/simd_clones.hpp"
#include "operators/common/tensor_values.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

// Reads element i of a float tensor of any float dtype as double.
template <class T>
void write(Tensor& t, int64_t i, double v) {
  static_cast<T*>(t.raw())[i] = static_cast<T>(static_cast<typename Compute<T>::type>(v));
}

// Y = (X - mean) / sqrt(variance + epsilon) * scale + shift over each of `rows` contiguous rows
// of `inner` floats (shift may be null). The variance is that of the deviations, a second pass,
// not E[x^2] - mean^2, which cancels where the mean is large against the spread. Sums in SIMD
// lanes, so in another order than a plain loop: a difference in the last bits.
VOLT_SIMD_CLONES void layer_norm_rows_f32(const float* x, const float* scale, const float* shift,
                                          float* y, int64_t rows, int64_t inner, float epsilon) {
  // Sums in four vectors, 64 floats a step, then one, then scalars: the adds do not wait on one
  // another (one accumulator ran 30% behind oneDNN's kernel at 768 wide).
  const float n = static_cast<float>(inner);
  for (int64_t r = 0; r < rows; ++r, x += inner, y += inner) {
    // Deviations from x[0] (exact where the values are close: Sterbenz) rather than the values:
    // sums of them stay small where the mean is large against the spread, and the mean of the
    // deviations keeps digits a mean held as a float would round off (768 values at 1000 +-
    // 0.01: the plain sum put the mean 1e-4 off, the float mean 3e-5, 1.4% and 0.4% of every
    // normalized value).
    const float origin = x[0];
    Floats16 a0 = {}, a1 = {}, a2 = {}, a3 = {}, v0, v1, v2, v3;
    int64_t i = 0;
    for (; i + 64 <= inner; i += 64) {
      load16(v0, x + i), load16(v1, x + i + 16), load16(v2, x + i + 32), load16(v3, x + i + 48);
      a0 += v0 - origin, a1 += v1 - origin, a2 += v2 - origin, a3 += v3 - origin;
    }
    for (; i + 16 <= inner; i += 16) load16(v0, x + i), a0 += v0 - origin;
    float sum = 0;
    for (int64_t j = i; j < inner; ++j) sum += x[j] - origin;
    a0 += a1, a2 += a3, a0 += a2;
    const float mean = (lane_sum(a0) + sum) / n;  // of the deviations
    a0 = a1 = a2 = a3 = Floats16{};
    for (i = 0; i + 64 <= inner; i += 64) {
      load16(v0, x + i), load16(v1, x + i + 16), load16(v2, x + i + 32), load16(v3, x + i + 48);
      v0 = v0 - origin - mean, v1 = v1 - origin - mean;
      v2 = v2 - origin - mean, v3 = v3 - origin - mean;
      a0 += v0 * v0, a1 += v1 * v1, a2 += v2 * v2, a3 += v3 * v3;
    }
    for (; i + 16 <= inner; i += 16) load16(v0, x + i), v0 = v0 - origin - mean, a0 += v0 * v0;
    float squares = 0;
    for (int64_t j = i; j < inner; ++j) squares += (x[j] - origin - mean) * (x[j] - origin - mean);
    a0 += a1, a2 += a3, a0 += a2;
    const float inv = 1.0f / std::sqrt((lane_sum(a0) + squares) / n + epsilon);
    if (shift) {
#pragma omp simd
      for (i = 0; i < inner; ++i) y[i] = (x[i] - origin - mean) * inv * scale[i] + shift[i];
    } else {
#pragma omp simd
      for (i = 0; i < inner; ++i) y[i] = (x[i] - origin - mean) * inv * scale[i];
    }
  }
}

// f32 rows whose scale and shift are one value per normalized element, and no Mean or
// InvStdDev output: the vectorized loop above. (oneDNN's layer normalization made a primitive
// per row count, 70-100 us at each new sentence length, for a pass over memory.)
struct LayerNormRowsState {
  int64_t rows = 0, inner = 0;
};

class LayerNorm final : public Kernel {
 public:
  explicit LayerNorm(const Node& n)
      : axis_(n.attr_int("axis", -1)), epsilon_(n.attr_float("epsilon", 1e-5f)) {}

  void infer(InferContext& ctx) const override {
    const Shape& x = ctx.shape(0);
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(x.size()), ctx.node());
    ctx.set_output(0, ctx.dtype(0), x);
    Shape stat(x.begin(), x.begin() + axis);
    stat.resize(x.size(), 1);
    if (ctx.output_count() > 1) ctx.set_output(1, DType::Float, stat);
    if (ctx.output_count() > 2) ctx.set_output(2, DType::Float, stat);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < static_cast<int64_t>(x.size()); ++d) (d < axis ? outer : inner) *= x[d];
    const bool scale_plain =
        numel_of(ctx.shape(1)) == inner && (!ctx.has_input(2) || numel_of(ctx.shape(2)) == inner);
    if (ctx.dtype(0) != DType::Float || ctx.node().has_output(1) || ctx.node().has_output(2) ||
        !scale_plain || outer * inner == 0)
      return;
    if (ctx.dtype(1) != DType::Float || (ctx.has_input(2) && ctx.dtype(2) != DType::Float)) return;
    auto st = std::make_shared<LayerNormRowsState>();
    st->rows = outer;
    st->inner = inner;
    ctx.set_state(st);
  }

  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    if (const auto* st = static_cast<const LayerNormRowsState*>(ctx.state_ptr())) {
      const auto* px = static_cast<const float*>(x.raw());
      const auto* scale = static_cast<const float*>(ctx.input(1).raw());
      const auto* shift =
          ctx.has_input(2) ? static_cast<const float*>(ctx.input(2).raw()) : nullptr;
      auto* py = static_cast<float*>(ctx.output(0).raw());
      // Tasks of about 16K elements, as many on each thread: 128 rows of 768 in 7 tasks left one
      // thread a third more to do than the other.
      const int64_t threads = std::max(1, ctx.threads());
      const int64_t tasks = (st->rows * st->inner + 16383) / 16384;
      const int64_t even = (tasks + threads - 1) / threads * threads;
      const int64_t rows_per_task = std::max<int64_t>(1, (st->rows + even - 1) / even);
      parallel_chunks(st->rows, rows_per_task, [&](int64_t lo, int64_t hi) {
        layer_norm_rows_f32(px + lo * st->inner, scale, shift, py + lo * st->inner, hi - lo,
                            st->inner, epsilon_);
      });
      return;
    }
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(x.rank()), ctx.node());
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < static_cast<int64_t>(x.rank()); ++d)
      (d < axis ? outer : inner) *= x.dim(d);
    const Tensor& scale = ctx.input(1);
    const auto s_strides =
        broadcast_strides(scale.shape(), Shape(x.shape().begin() + axis, x.shape().end()));
    const Tensor* bias = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    const auto b_strides =
        bias ? broadcast_strides(bias->shape(), Shape(x.shape().begin() + axis, x.shape().end()))
             : std::vector<int64_t>{};
    const Shape inner_shape(x.shape().begin() + axis, x.shape().end());
    // Scale and bias are broadcast over the normalized axes: precompute their flat indices.
    std::vector<double> sc(static_cast<size_t>(inner)), bi(static_cast<size_t>(inner), 0.0);
    for (int64_t i = 0; i < inner; ++i) {
      int64_t rem = i, so = 0, bo = 0;
      for (size_t d = inner_shape.size(); d-- > 0;) {
        const int64_t k = rem % inner_shape[d];
        rem /= inner_shape[d];
        so += k * s_strides[d];
        if (bias) bo += k * b_strides[d];
      }
      sc[i] = value_at(scale, so);
      if (bias) bi[i] = value_at(*bias, bo);
    }
    Tensor* mean_out = ctx.has_output(1) ? &ctx.output(1) : nullptr;
    Tensor* inv_out = ctx.has_output(2) ? &ctx.output(2) : nullptr;
    dispatch_numeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!std::is_floating_point_v<typename Compute<T>::type>) {
        ctx.error("needs floating-point input");
      } else {
        const T* px = static_cast<const T*>(x.raw());
        Tensor& y = ctx.output(0);
#pragma omp parallel for if (outer * inner > 65536)
        for (int64_t o = 0; o < outer; ++o) {
          double mean = 0, var = 0;
          for (int64_t i = 0; i < inner; ++i)
            mean += static_cast<double>(static_cast<typename Compute<T>::type>(px[o * inner + i]));
          mean /= static_cast<double>(inner);
          for (int64_t i = 0; i < inner; ++i) {
            const double d =
                static_cast<double>(static_cast<typename Compute<T>::type>(px[o * inner + i])) -
                mean;
            var += d * d;
          }
          const double inv = 1.0 / std::sqrt(var / static_cast<double>(inner) + epsilon_);
          for (int64_t i = 0; i < inner; ++i)
            write<T>(
                y, o * inner + i,
                (static_cast<double>(static_cast<typename Compute<T>::type>(px[o * inner + i])) -
                 mean) * inv *
                        sc[i] +
                    bi[i]);
          if (mean_out) mean_out->data<float>()[o] = static_cast<float>(mean);
          if (inv_out) inv_out->data<float>()[o] = static_cast<float>(inv);
        }
      }
    });
  }

 private:
  int64_t axis_;
  float epsilon_;
};

// MeanVarianceNormalization's loop: each slice normalized over the `reduced` axes.
void normalize_over(const Tensor& x, Tensor& y, const std::vector<char>& reduced, double epsilon,
                    const RunContext& ctx) {
  if (x.numel() == 0) return;  // nothing to write (and no slice to divide by)
  const Shape& s = x.shape();
  const auto st = strides_of(s);
  std::vector<int64_t> base{0}, inner{0};
  for (size_t d = 0; d < s.size(); ++d) {
    auto& v = reduced[d] ? inner : base;
    std::vector<int64_t> next;
    for (int64_t o : v)
      for (int64_t i = 0; i < s[d]; ++i) next.push_back(o + i * st[d]);
    v = std::move(next);
  }
  dispatch_numeric(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_floating_point_v<typename Compute<T>::type>) {
      ctx.error("needs floating-point input");
    } else {
      for (int64_t b : base) {
        double mean = 0, var = 0;
        for (int64_t i : inner) mean += value_at(x, b + i);
        mean /= static_cast<double>(inner.size());
        for (int64_t i : inner) var += (value_at(x, b + i) - mean) * (value_at(x, b + i) - mean);
        const double inv = 1.0 / std::sqrt(var / static_cast<double>(inner.size()) + epsilon);
        for (int64_t i : inner) write<T>(y, b + i, (value_at(x, b + i) - mean) * inv);
      }
    }
  });
}

// X [N, C, ...] normalized over each of `groups` runs of C / groups channels (contiguous), in
// parallel; the mean and variance summed in double, then each channel scaled and shifted by
// scale[at] and bias[at], `at` the channel (`per_channel`) or the group. GroupNormalization's
// loop, and InstanceNormalization's with one channel a group.
void normalize_groups(const Tensor& x, Tensor& y, int64_t groups, const std::vector<double>& scale,
                      const std::vector<double>& bias, bool per_channel, double epsilon,
                      const RunContext& ctx) {
  const int64_t n = x.dim(0), c = x.dim(1), g = groups, per = c / g;
  if (x.numel() == 0) return;
  const int64_t spatial = x.numel() / (n * c), group_size = per * spatial;
  dispatch_floating(x.dtype(), ctx, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = typename Compute<T>::type;
    const T* px = static_cast<const T*>(x.raw());
    T* py = static_cast<T*>(y.raw());
    parallel_for(n * g, n * g > 1 && x.numel() > 16384, [&](int64_t ng) {
      const T* in = px + ng * group_size;
      T* out = py + ng * group_size;
      double sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t i = 0; i < group_size; ++i) sum += static_cast<double>(static_cast<C>(in[i]));
      const double mean = sum / static_cast<double>(group_size);
      double sq = 0;
#pragma omp simd reduction(+ : sq)
      for (int64_t i = 0; i < group_size; ++i) {
        const double d = static_cast<double>(static_cast<C>(in[i])) - mean;
        sq += d * d;
      }
      const double inv = 1.0 / std::sqrt(sq / static_cast<double>(group_size) + epsilon);
      for (int64_t k = 0; k < per; ++k) {
        const size_t at = static_cast<size_t>(per_channel ? ng % g * per + k : ng % g);
        const C a = static_cast<C>(inv * scale[at]),
                b = static_cast<C>(bias[at] - mean * inv * scale[at]);
        const T* src = in + k * spatial;
        T* dst = out + k * spatial;
#pragma omp simd
        for (int64_t i = 0; i < spatial; ++i)
          dst[i] = static_cast<T>(static_cast<C>(static_cast<C>(src[i]) * a + b));
      }
    });
  });
}

class InstanceNorm final : public Kernel {
 public:
  explicit InstanceNorm(const Node& n) : epsilon_(n.attr_float("epsilon", 1e-5f)) {}
  void infer(InferContext& ctx) const override {
    const Shape& x = ctx.shape(0);
    if (x.size() < 2) ctx.input_error("input must have rank >= 2, got " + shape_str(x));
    for (size_t i : {size_t{1}, size_t{2}})
      if (ctx.shape(i) != Shape{x[1]})
        ctx.input_error(std::string(i == 1 ? "scale" : "B") + " must have shape [" +
                        std::to_string(x[1]) + "], got " + shape_str(ctx.shape(i)));
    ctx.set_output(0, ctx.dtype(0), x);
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    normalize_groups(x, ctx.output(0), x.dim(1), to_doubles(ctx.input(1)), to_doubles(ctx.input(2)),
                     true, epsilon_, ctx);
  }

 private:
  float epsilon_;
};

// GroupNormalization: X [N, C, ...] normalized over each group of C / num_groups channels
// (with their spatial axes), then scaled and shifted per channel (opset 21) or per group
// (opset 18, whose scale and bias have num_groups entries). Groups across the threads; each
// group's values are contiguous, its mean and variance summed in double.
class GroupNorm final : public Kernel {
 public:
  explicit GroupNorm(const Node& n)
      : groups_(n.attr_int("num_groups", 0)),
        epsilon_(n.attr_float("epsilon", 1e-5f)),
        per_channel_(n.opset >= 21) {
    VOLT_CHECK(groups_ > 0, InvalidModel, n.describe() + ": num_groups must be positive");
  }
  void infer(InferContext& ctx) const override {
    const Shape& x = ctx.shape(0);
    if (x.size() < 2) ctx.input_error("input must have rank >= 2, got " + shape_str(x));
    if (x[1] % groups_ != 0)
      ctx.input_error(std::to_string(x[1]) + " channels do not split into " +
                      std::to_string(groups_) + " groups");
    const int64_t params = per_channel_ ? x[1] : groups_;
    for (size_t i : {size_t{1}, size_t{2}})
      if (ctx.shape(i) != Shape{params})
        ctx.input_error(std::string(i == 1 ? "scale" : "bias") + " must have shape [" +
                        std::to_string(params) + "], got " + shape_str(ctx.shape(i)));
    ctx.set_output(0, ctx.dtype(0), x);
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const int64_t g = groups_;
    normalize_groups(x, ctx.output(0), g, to_doubles(ctx.input(1)), to_doubles(ctx.input(2)),
                     per_channel_, epsilon_, ctx);
  }

 private:
  int64_t groups_;
  float epsilon_;
  bool per_channel_;
};

class MeanVarianceNorm final : public Kernel {
 public:
  explicit MeanVarianceNorm(const Node& n) : axes_(n.attr_ints("axes", {0, 2, 3})) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.dtype(0), ctx.shape(0)); }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    std::vector<char> reduced(x.rank(), 0);
    for (int64_t a : axes_)
      reduced[normalize_axis(a, static_cast<int64_t>(x.rank()), ctx.node())] = 1;
    normalize_over(x, ctx.output(0), reduced, 1e-9, ctx);
  }

 private:
  std::vector<int64_t> axes_;
};

class Lrn final : public Kernel {
 public:
  explicit Lrn(const Node& n)
      : size_(n.attr_int("size")),
        alpha_(n.attr_float("alpha", 1e-4f)),
        beta_(n.attr_float("beta", 0.75f)),
        bias_(n.attr_float("bias", 1.0f)) {}
  void infer(InferContext& ctx) const override {
    ctx.set_output(0, ctx.dtype(0), ctx.shape(0));
    if (ctx.dtype(0) != DType::Float) ctx.runs_reference_loop("");
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    const int64_t n = x.dim(0), c = x.dim(1), inner = x.numel() / std::max<int64_t>(n * c, 1);
    const int64_t lo = (size_ - 1) / 2, hi = size_ - 1 - lo;
    if (x.dtype() == DType::Float) {
      across_channels_f32(x.data<float>(), y.data<float>(), n, c, inner, lo, hi);
      return;
    }
    dispatch_numeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!std::is_floating_point_v<typename Compute<T>::type>) {
        ctx.error("needs floating-point input");
      } else {
        for (int64_t b = 0; b < n; ++b)
          for (int64_t ch = 0; ch < c; ++ch)
            for (int64_t i = 0; i < inner; ++i) {
              double sq = 0;
              for (int64_t k = std::max<int64_t>(0, ch - lo); k <= std::min(c - 1, ch + hi); ++k) {
                const double v = value_at(x, (b * c + k) * inner + i);
                sq += v * v;
              }
              const int64_t e = (b * c + ch) * inner + i;
              write<T>(y, e,
                       value_at(x, e) / std::pow(bias_ + alpha_ / static_cast<double>(size_) * sq,
                                                 static_cast<double>(beta_)));
            }
      }
    });
  }

 private:
  // f32: pieces of kPiece positions of one image across the threads, the window's squares
  // summed for a vector of positions at a time; AlexNet's and GoogLeNet's beta of 0.75 as
  // square roots instead of pow.
  void across_channels_f32(const float* x, float* y, int64_t n, int64_t c, int64_t inner,
                           int64_t lo, int64_t hi) const {
    constexpr int64_t kPiece = 256;
    const int64_t pieces = (inner + kPiece - 1) / kPiece;
    const float scale = alpha_ / static_cast<float>(size_), bias = bias_, beta = beta_;
    parallel_for(n * pieces, n * c * inner > 16384, [&](int64_t t) {
      const int64_t b = t / pieces, i0 = t % pieces * kPiece, len = std::min(kPiece, inner - i0);
      const float* img = x + b * c * inner + i0;
      float* out = y + b * c * inner + i0;
      float sum[kPiece];
      for (int64_t ch = 0; ch < c; ++ch) {
        std::fill(sum, sum + len, 0.0f);
        for (int64_t k = std::max<int64_t>(0, ch - lo); k <= std::min(c - 1, ch + hi); ++k) {
          const float* row = img + k * inner;
#pragma omp simd
          for (int64_t i = 0; i < len; ++i) sum[i] += row[i] * row[i];
        }
        const float* in = img + ch * inner;
        float* o = out + ch * inner;
        if (beta == 0.75f) {
#pragma omp simd
          for (int64_t i = 0; i < len; ++i) {
            const float t2 = bias + scale * sum[i], r = std::sqrt(t2);
            o[i] = in[i] / (r * std::sqrt(r));
          }
        } else {
          for (int64_t i = 0; i < len; ++i) o[i] = in[i] / std::pow(bias + scale * sum[i], beta);
        }
      }
    });
  }

  int64_t size_;
  float alpha_, beta_, bias_;
};

}  // namespace

VOLT_REGISTER_KERNEL(layer_norm, {.op = "LayerNormalization",
                                  .since = 17,
                                  .types = kFloatTypes,
                                  .create = make_kernel<LayerNorm>});
VOLT_REGISTER_KERNEL(instance_norm, {.op = "InstanceNormalization",
                                     .types = kFloatTypes,
                                     .create = make_kernel<InstanceNorm>});
VOLT_REGISTER_KERNEL(group_norm, {.op = "GroupNormalization",
                                  .since = 18,
                                  .types = kFloatTypes,
                                  .create = make_kernel<GroupNorm>});
VOLT_REGISTER_KERNEL(mvn, {.op = "MeanVarianceNormalization",
                           .since = 9,
                           .types = kFloatTypes,
                           .create = make_kernel<MeanVarianceNorm>});
VOLT_REGISTER_KERNEL(lrn, {.op = "LRN", .types = kFloatTypes, .create = make_kernel<Lrn>});

}  // namespace volt
