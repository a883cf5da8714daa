// LayerNormalization (oneDNN for f32 when only Y is asked for), GroupNormalization and
// InstanceNormalization (one loop over groups of channels), MeanVarianceNormalization and LRN.
#include <algorithm>
#include <cmath>

#include "operators/common/dispatch.hpp"
#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/common/tensor_values.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

// Reads element i of a float tensor of any float dtype as double.
template <class T>
void write(Tensor& t, int64_t i, double v) {
  static_cast<T*>(t.raw())[i] = static_cast<T>(static_cast<typename Compute<T>::type>(v));
}

// One primitive over `rows` rows of the normalized width.
struct LayerNormRows {
  int64_t rows = 0;
  dnnl::layer_normalization_forward prim;
  dnnl::memory::desc data, scratch;
};
// The rows in runs, one primitive each: one run of all rows for a session's first shape. Where
// input shapes vary, the largest power of two P <= rows, run twice when rows is not one: over
// the first P rows and over the last P (the rows between are computed twice, to the same values:
// Y never aliases X). The node keeps its primitive per P (NodeMemo), so a new length is served
// by a primitive made for an earlier one, at the price of one more call and at most P - 1 rows
// normalized twice; runs of each power of two in rows (130 = 128 + 2) took up to eight calls.
struct LayerNormState {
  std::vector<std::pair<std::shared_ptr<const LayerNormRows>, int64_t>> runs;  // (, first row)
  dnnl::memory::desc scale;
  int64_t inner = 0;  // the normalized width
  size_t scratch_bytes = 0;
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
    dnnl_adapter::prepare_or_fall_back(ctx, [&] {
      auto st = std::make_shared<LayerNormState>();
      st->scale = dnnl_adapter::plain_md({inner}, dnnl::memory::data_type::f32);
      st->inner = inner;
      auto make = [&](int64_t rows) {
        auto run = std::make_shared<LayerNormRows>();
        run->rows = rows;
        run->data = dnnl_adapter::plain_md({rows, inner}, dnnl::memory::data_type::f32);
        auto flags = dnnl::normalization_flags::use_scale;
        if (ctx.has_input(2)) flags |= dnnl::normalization_flags::use_shift;
        dnnl::layer_normalization_forward::desc d(dnnl::prop_kind::forward_inference, run->data,
                                                  epsilon_, flags);
        dnnl::layer_normalization_forward::primitive_desc pd(d, dnnl_adapter::scratch_attr(),
                                                             dnnl_adapter::engine());
        run->prim = dnnl::layer_normalization_forward(pd);
        run->scratch = pd.scratchpad_desc();
        return run;
      };
      if (!ctx.shapes_vary() || !ctx.memo()) {
        st->runs.emplace_back(make(outer), 0);
      } else {
        int64_t p = 1;
        while (p <= outer / 2) p *= 2;
        const std::string key = "rows " + std::to_string(p) + " of " + std::to_string(inner);
        auto run = std::static_pointer_cast<const LayerNormRows>(ctx.memo()->find(key));
        if (!run) {
          run = make(p);
          ctx.memo()->keep(key, std::const_pointer_cast<LayerNormRows>(run));
        }
        st->runs.emplace_back(run, 0);
        if (p != outer) st->runs.emplace_back(run, outer - p);
      }
      for (const auto& [run, first] : st->runs)
        st->scratch_bytes = std::max(st->scratch_bytes, run->scratch.get_size());
      ctx.request_scratch(st->scratch_bytes);
      ctx.set_state(st);
    });
  }

  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    if (const auto* st = static_cast<const LayerNormState*>(ctx.state_ptr())) {
      const float* src = static_cast<const float*>(x.raw());
      float* dst = static_cast<float*>(ctx.output(0).raw());
      for (const auto& [run, first] : st->runs) {
        dnnl_adapter::Args args = {{DNNL_ARG_SRC, run->data, src + first * st->inner},
                                   {DNNL_ARG_SCALE, st->scale, ctx.input(1).raw()},
                                   {DNNL_ARG_DST, run->data, dst + first * st->inner}};
        if (ctx.has_input(2)) args.add(DNNL_ARG_SHIFT, st->scale, ctx.input(2).raw());
        dnnl_adapter::execute(run->prim, args, run->scratch, ctx.scratch());
      }
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
