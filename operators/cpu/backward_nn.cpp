// volt's backward kernels for the network layers (domain "ai.volt"): convolution (data and
// weights, all attributes), bias, pooling (max, average, global), batch normalization (batch or
// running statistics), layer normalization and Slice. Reference loops in double precision.
#include <cmath>

#include "operators/common/dispatch.hpp"
#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/common/tensor_values.hpp"
#include "operators/cpu/conv_reference.hpp"
#include "operators/grad/gradient_rule.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

// Visits every (output position, kernel position) pair of a window geometry with the flat input
// offset it touches (or -1 in the padding): f(out_flat, kernel_flat, in_flat).
template <class F>
void for_each_tap(const WindowGeometry& g, F f) {
  const size_t r = g.in.size();
  const int64_t out_sp = numel_of(g.out), k_sp = numel_of(g.kernel);
  std::vector<int64_t> o(r), k(r);
  for (int64_t op = 0; op < out_sp; ++op) {
    int64_t rem = op;
    for (size_t d = r; d-- > 0;) {
      o[d] = rem % g.out[d];
      rem /= g.out[d];
    }
    for (int64_t kp = 0; kp < k_sp; ++kp) {
      int64_t krem = kp, off = 0;
      bool inside = true;
      for (size_t d = r; d-- > 0;) {
        k[d] = krem % g.kernel[d];
        krem /= g.kernel[d];
      }
      for (size_t d = 0; d < r; ++d) {
        const int64_t i = o[d] * g.strides[d] - g.pad_begin[d] + k[d] * g.dilations[d];
        inside = inside && i >= 0 && i < g.in[d];
        off = off * g.in[d] + i;
      }
      f(op, kp, inside ? off : -1);
    }
  }
}

// oneDNN's backward-data or backward-weights convolution for f32, in the layouts oneDNN
// chooses (its jit kernels want blocked or channels-last ones; with plain layouts it falls back
// to im2col and a GEMM): the graph's tensors are reordered into and out of the scratch.
struct ConvGradState {
  dnnl::primitive prim;
  dnnl::memory::desc scratch;  // the primitive's own, at the start of the run's scratch
  dnnl_adapter::Staged dy, x, w;
};

class ConvGrad final : public Kernel {
 public:
  explicit ConvGrad(const Node& n)
      : attrs_(n), group_(n.attr_int("group", 1)), wrt_(n.attr_int("wrt", 0)) {}
  void infer(InferContext& ctx) const override {
    ctx.set_output(0, ctx.dtype(1 + wrt_), ctx.shape(1 + wrt_));
    if (ctx.dtype(0) != DType::Float || ctx.dtype(1) != DType::Float ||
        ctx.dtype(2) != DType::Float || ctx.shape(1).size() > 5)
      return;
    const ConvShapes s = conv_shapes(attrs_, group_, ctx.shape(1), ctx.shape(2), ctx.node());
    if (s.out != ctx.shape(0) || numel_of(s.out) == 0) return;
    try {
      ctx.set_state(prepare(ctx, s));
    } catch (const KernelUnsupported&) {
    }
  }
  void run(RunContext& ctx) const override {
    if (const auto* st = static_cast<const ConvGradState*>(ctx.state_ptr())) {
      void* scratch = ctx.scratch();
      const void* dy = ctx.input(0).raw();
      void* out = ctx.output(0).raw();
      if (wrt_ == 0) {
        dnnl_adapter::execute(
            st->prim,
            {{DNNL_ARG_DIFF_DST, st->dy.wanted, st->dy.in(dy, scratch)},
             {DNNL_ARG_WEIGHTS, st->w.wanted, st->w.in(ctx.input(2).raw(), scratch)},
             {DNNL_ARG_DIFF_SRC, st->x.wanted, st->x.out(out, scratch)}},
            st->scratch, scratch);
        st->x.finish(out, scratch);
      } else {
        dnnl_adapter::execute(st->prim,
                              {{DNNL_ARG_DIFF_DST, st->dy.wanted, st->dy.in(dy, scratch)},
                               {DNNL_ARG_SRC, st->x.wanted, st->x.in(ctx.input(1).raw(), scratch)},
                               {DNNL_ARG_DIFF_WEIGHTS, st->w.wanted, st->w.out(out, scratch)}},
                              st->scratch, scratch);
        st->w.finish(out, scratch);
      }
      return;
    }
    reference(ctx);
  }

 private:
  std::shared_ptr<ConvGradState> prepare(InferContext& ctx, const ConvShapes& s) const {
    return dnnl_adapter::guarded(ctx.node(), [&] {
      using dims = dnnl::memory::dims;
      const auto f32 = dnnl::memory::data_type::f32;
      auto st = std::make_shared<ConvGradState>();
      Shape ws = ctx.shape(2);
      if (s.group > 1) {  // grouped weights as [G, M/G, C/G, k...]
        Shape g{s.group, s.m / s.group};
        g.insert(g.end(), ws.begin() + 1, ws.end());
        ws = g;
      }
      const dnnl::memory::desc x = dnnl_adapter::plain_md(ctx.shape(1), f32),
                               w = dnnl_adapter::plain_md(ws, f32),
                               dy = dnnl_adapter::plain_md(s.out, f32);
      auto any = [&](const Shape& shape) {
        return dnnl::memory::desc(dims(shape.begin(), shape.end()), f32,
                                  dnnl::memory::format_tag::any);
      };
      dims strides(s.win.strides.begin(), s.win.strides.end()),
          pl(s.win.pad_begin.begin(), s.win.pad_begin.end()),
          pr(s.win.pad_end.begin(), s.win.pad_end.end()), dil;
      for (int64_t d : s.win.dilations) dil.push_back(d - 1);
      // oneDNN's right padding must make its output size formula give ours exactly.
      for (size_t i = 0; i < pr.size(); ++i) {
        const int64_t eff = (s.win.kernel[i] - 1) * s.win.dilations[i] + 1;
        pr[i] = (s.win.out[i] - 1) * s.win.strides[i] + eff - s.win.in[i] - s.win.pad_begin[i];
      }
      dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training,
                                         dnnl::algorithm::convolution_direct, any(ctx.shape(1)),
                                         any(ws), any(s.out), strides, dil, pl, pr);
      dnnl::convolution_forward::primitive_desc fpd(fd, dnnl_adapter::engine());
      size_t bytes = 0;
      if (wrt_ == 0) {
        dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct,
                                                any(ctx.shape(1)), any(ws), any(s.out), strides,
                                                dil, pl, pr);
        dnnl::convolution_backward_data::primitive_desc pd(d, dnnl_adapter::scratch_attr(),
                                                           dnnl_adapter::engine(), fpd);
        st->prim = dnnl::convolution_backward_data(pd);
        st->scratch = pd.scratchpad_desc();
        bytes = st->scratch.get_size();
        st->dy = dnnl_adapter::Staged(dy, pd.diff_dst_desc(), true, bytes);
        st->w = dnnl_adapter::Staged(w, pd.weights_desc(), true, bytes);
        st->x = dnnl_adapter::Staged(x, pd.diff_src_desc(), false, bytes);
      } else {
        dnnl::convolution_backward_weights::desc d(dnnl::algorithm::convolution_direct,
                                                   any(ctx.shape(1)), any(ws), any(s.out), strides,
                                                   dil, pl, pr);
        dnnl::convolution_backward_weights::primitive_desc pd(d, dnnl_adapter::scratch_attr(),
                                                              dnnl_adapter::engine(), fpd);
        st->prim = dnnl::convolution_backward_weights(pd);
        st->scratch = pd.scratchpad_desc();
        bytes = st->scratch.get_size();
        st->dy = dnnl_adapter::Staged(dy, pd.diff_dst_desc(), true, bytes);
        st->x = dnnl_adapter::Staged(x, pd.src_desc(), true, bytes);
        st->w = dnnl_adapter::Staged(w, pd.diff_weights_desc(), false, bytes);
      }
      ctx.request_scratch(bytes);
      return st;
    });
  }

  void reference(RunContext& ctx) const {
    const Tensor &xt = ctx.input(1), &wt = ctx.input(2);
    const ConvShapes s = conv_shapes(attrs_, group_, xt.shape(), wt.shape(), ctx.node());
    const auto dy = to_doubles(ctx.input(0)), x = to_doubles(xt), w = to_doubles(wt);
    const int64_t in_sp = numel_of(s.win.in), out_sp = numel_of(s.win.out),
                  k_sp = numel_of(s.win.kernel);
    const int64_t cg = s.c / s.group, mg = s.m / s.group;
    std::vector<double> out(static_cast<size_t>(wrt_ == 0 ? x.size() : w.size()), 0.0);
    std::vector<std::tuple<int64_t, int64_t, int64_t>> taps;  // (out, kernel, in) inside the input
    for_each_tap(s.win, [&](int64_t op, int64_t kp, int64_t ip) {
      if (ip >= 0) taps.emplace_back(op, kp, ip);
    });
    if (wrt_ == 0) {
#pragma omp parallel for
      for (int64_t n = 0; n < s.n; ++n)
        for (int64_t m = 0; m < s.m; ++m) {
          const int64_t g = m / mg;
          const double* dyp = dy.data() + (n * s.m + m) * out_sp;
          for (int64_t c = 0; c < cg; ++c) {
            double* dx = out.data() + (n * s.c + g * cg + c) * in_sp;
            const double* wk = w.data() + (m * cg + c) * k_sp;
            for (const auto& [op, kp, ip] : taps) dx[ip] += dyp[op] * wk[kp];
          }
        }
    } else {
#pragma omp parallel for
      for (int64_t m = 0; m < s.m; ++m) {
        const int64_t g = m / mg;
        for (int64_t c = 0; c < cg; ++c) {
          double* dw = out.data() + (m * cg + c) * k_sp;
          for (int64_t n = 0; n < s.n; ++n) {
            const double* dyp = dy.data() + (n * s.m + m) * out_sp;
            const double* xp = x.data() + (n * s.c + g * cg + c) * in_sp;
            for (const auto& [op, kp, ip] : taps) dw[kp] += dyp[op] * xp[ip];
          }
        }
      }
    }
    from_doubles(ctx.output(0), out);
  }

  WindowAttributes attrs_;
  int64_t group_, wrt_;
};

// The gradient of a per-channel bias: dy summed over every axis but 1.
class BiasGrad final : public Kernel {
 public:
  explicit BiasGrad(const Node&) {}
  void infer(InferContext& ctx) const override {
    ctx.set_output(0, ctx.dtype(0), {ctx.shape(0).at(1)});
  }
  void run(RunContext& ctx) const override {
    const Tensor& t = ctx.input(0);
    const int64_t n = t.dim(0), c = t.dim(1), inner = t.numel() / std::max<int64_t>(n * c, 1);
    dispatch_numeric(t.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = typename Compute<T>::type;
      const T* dy = static_cast<const T*>(t.raw());
      T* out = static_cast<T*>(ctx.output(0).raw());
#pragma omp parallel for if (t.numel() > 65536)
      for (int64_t ch = 0; ch < c; ++ch) {
        C acc = 0;
        for (int64_t b = 0; b < n; ++b)
          for (int64_t i = 0; i < inner; ++i) acc += static_cast<C>(dy[(b * c + ch) * inner + i]);
        out[ch] = static_cast<T>(acc);
      }
    });
  }
};

class PoolGrad final : public Kernel {
 public:
  explicit PoolGrad(const Node& n)
      : attrs_(n),
        max_(n.attr_string("kind", "max") == "max"),
        global_(n.attr_int("global", 0) != 0),
        count_include_pad_(n.attr_int("count_include_pad", 0) != 0) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.dtype(1), ctx.shape(1)); }
  void run(RunContext& ctx) const override {
    const Tensor& xt = ctx.input(1);
    const std::vector<int64_t> spatial(xt.shape().begin() + 2, xt.shape().end());
    WindowAttributes a = attrs_;
    if (global_) a.pads.clear(), a.strides.clear(), a.auto_pad = "NOTSET";
    const WindowGeometry g =
        resolve_window(a, spatial, global_ ? spatial : attrs_.kernel_shape, ctx.node());
    const int64_t planes = xt.dim(0) * xt.dim(1), in_sp = numel_of(g.in), out_sp = numel_of(g.out);
    // Per output position: the taps inside the input (flat: those of position op are
    // taps[first[op] .. first[op + 1])), and (for averages) the divisor. Built once, for every
    // plane.
    std::vector<int64_t> first(static_cast<size_t>(out_sp) + 1, 0), taps;
    taps.reserve(static_cast<size_t>(out_sp * numel_of(g.kernel)));
    for_each_tap(g, [&](int64_t op, int64_t, int64_t ip) {
      if (ip >= 0) taps.push_back(ip);
      first[static_cast<size_t>(op) + 1] = static_cast<int64_t>(taps.size());
    });
    std::vector<int64_t> padded(static_cast<size_t>(out_sp), 0);
    if (count_include_pad_) {  // taps inside input + pads (not past the end padding)
      WindowGeometry padded_g = g;
      for (size_t d = 0; d < g.in.size(); ++d)
        padded_g.in[d] = g.in[d] + g.pad_begin[d] + g.pad_end[d], padded_g.pad_begin[d] = 0;
      for_each_tap(padded_g, [&](int64_t op, int64_t, int64_t ip) { padded[op] += ip >= 0; });
    }
    dispatch_numeric(xt.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = std::conditional_t<std::is_same_v<T, bool>, int, typename Compute<T>::type>;
      const T* x = static_cast<const T*>(xt.raw());
      const T* dy = static_cast<const T*>(ctx.input(0).raw());
      T* dx = static_cast<T*>(ctx.output(0).raw());
#pragma omp parallel for if (planes * in_sp > 65536)
      for (int64_t p = 0; p < planes; ++p) {
        const T* xp = x + p * in_sp;
        // Sums in C: straight into dx where T is C (float, double), else in a buffer.
        std::vector<C> buffer;
        C* acc;
        if constexpr (std::is_same_v<T, C>) {
          acc = dx + p * in_sp;
          std::fill(acc, acc + in_sp, C(0));
        } else {
          buffer.assign(static_cast<size_t>(in_sp), C(0));
          acc = buffer.data();
        }
        for (int64_t op = 0; op < out_sp; ++op) {
          const int64_t* t = taps.data() + first[op];
          const int64_t n = first[op + 1] - first[op];
          if (n == 0) continue;
          const C d = static_cast<C>(dy[p * out_sp + op]);
          if (max_) {
            int64_t best = t[0];
            for (int64_t i = 1; i < n; ++i)
              if (static_cast<C>(xp[t[i]]) > static_cast<C>(xp[best])) best = t[i];
            acc[best] += d;
          } else {
            const C count = static_cast<C>(count_include_pad_ ? padded[op] : n);
            for (int64_t i = 0; i < n; ++i) acc[t[i]] += d / count;
          }
        }
        if constexpr (!std::is_same_v<T, C>) {
          T* dxp = dx + p * in_sp;
          for (int64_t i = 0; i < in_sp; ++i) dxp[i] = static_cast<T>(acc[i]);
        }
      }
    });
  }

 private:
  WindowAttributes attrs_;
  bool max_, global_, count_include_pad_;
};

// dx, dscale, dbias of BatchNormalization: with batch statistics (training) or running ones.
class BatchNormGrad final : public Kernel {
 public:
  explicit BatchNormGrad(const Node& n)
      : epsilon_(n.attr_float("epsilon", 1e-5f)), training_(n.attr_int("training", 1) != 0) {}
  void infer(InferContext& ctx) const override {
    ctx.set_output(0, ctx.dtype(1), ctx.shape(1));
    ctx.set_output(1, ctx.dtype(2), ctx.shape(2));
    ctx.set_output(2, ctx.dtype(2), ctx.shape(2));
  }
  void run(RunContext& ctx) const override {
    const Tensor& xt = ctx.input(1);
    const int64_t n = xt.dim(0), c = xt.dim(1), inner = xt.numel() / std::max<int64_t>(n * c, 1);
    const double count = static_cast<double>(n * inner);
    const auto dy = to_doubles(ctx.input(0)), x = to_doubles(xt), scale = to_doubles(ctx.input(2));
    const std::vector<double> rmean =
        ctx.has_input(3) ? to_doubles(ctx.input(3)) : std::vector<double>{};
    const std::vector<double> rvar =
        ctx.has_input(4) ? to_doubles(ctx.input(4)) : std::vector<double>{};
    std::vector<double> dx(x.size()), dscale(static_cast<size_t>(c)), dbias(static_cast<size_t>(c));
    for (int64_t ch = 0; ch < c; ++ch) {
      double mean = 0, var = 0;
      auto at = [&](int64_t b, int64_t i) { return (b * c + ch) * inner + i; };
      if (training_) {
        for (int64_t b = 0; b < n; ++b)
          for (int64_t i = 0; i < inner; ++i) mean += x[at(b, i)];
        mean /= count;
        for (int64_t b = 0; b < n; ++b)
          for (int64_t i = 0; i < inner; ++i) var += (x[at(b, i)] - mean) * (x[at(b, i)] - mean);
        var /= count;
      } else {
        mean = rmean.at(ch);
        var = rvar.at(ch);
      }
      const double inv = 1 / std::sqrt(var + epsilon_);
      double sum_dy = 0, sum_dy_xhat = 0;
      for (int64_t b = 0; b < n; ++b)
        for (int64_t i = 0; i < inner; ++i) {
          sum_dy += dy[at(b, i)];
          sum_dy_xhat += dy[at(b, i)] * (x[at(b, i)] - mean) * inv;
        }
      dscale[ch] = sum_dy_xhat;
      dbias[ch] = sum_dy;
      for (int64_t b = 0; b < n; ++b)
        for (int64_t i = 0; i < inner; ++i) {
          const double xhat = (x[at(b, i)] - mean) * inv;
          dx[at(b, i)] =
              training_
                  ? scale[ch] * inv * (dy[at(b, i)] - sum_dy / count - xhat * sum_dy_xhat / count)
                  : scale[ch] * inv * dy[at(b, i)];
        }
    }
    from_doubles(ctx.output(0), dx);
    if (ctx.has_output(1)) from_doubles(ctx.output(1), dscale);
    if (ctx.has_output(2)) from_doubles(ctx.output(2), dbias);
  }

 private:
  float epsilon_;
  bool training_;
};

// dx, dscale, dbias of LayerNormalization (scale and bias shaped like the normalized axes).
class LayerNormGrad final : public Kernel {
 public:
  explicit LayerNormGrad(const Node& n)
      : axis_(n.attr_int("axis", -1)), epsilon_(n.attr_float("epsilon", 1e-5f)) {}
  void infer(InferContext& ctx) const override {
    ctx.set_output(0, ctx.dtype(1), ctx.shape(1));
    ctx.set_output(1, ctx.dtype(2), ctx.shape(2));
    if (ctx.output_count() > 2) ctx.set_output(2, ctx.dtype(2), ctx.shape(2));
  }
  void run(RunContext& ctx) const override {
    const Tensor &xt = ctx.input(1), &st = ctx.input(2);
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(xt.rank()), ctx.node());
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < static_cast<int64_t>(xt.rank()); ++d)
      (d < axis ? outer : inner) *= xt.dim(d);
    VOLT_CHECK(st.numel() == inner, NotImplemented,
               ctx.node().describe() +
                   ": the gradient needs a scale with one value per normalized element");
    const auto dy = to_doubles(ctx.input(0)), x = to_doubles(xt), scale = to_doubles(st);
    std::vector<double> dx(x.size()), dscale(static_cast<size_t>(inner), 0.0),
        dbias(static_cast<size_t>(inner), 0.0);
    for (int64_t o = 0; o < outer; ++o) {
      const double* xr = x.data() + o * inner;
      const double* dr = dy.data() + o * inner;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < inner; ++i) mean += xr[i];
      mean /= static_cast<double>(inner);
      for (int64_t i = 0; i < inner; ++i) var += (xr[i] - mean) * (xr[i] - mean);
      const double inv = 1 / std::sqrt(var / static_cast<double>(inner) + epsilon_);
      double m1 = 0, m2 = 0;
      for (int64_t i = 0; i < inner; ++i) {
        const double xhat = (xr[i] - mean) * inv, g = dr[i] * scale[i];
        dscale[i] += dr[i] * xhat;
        dbias[i] += dr[i];
        m1 += g;
        m2 += g * xhat;
      }
      m1 /= static_cast<double>(inner);
      m2 /= static_cast<double>(inner);
      for (int64_t i = 0; i < inner; ++i) {
        const double xhat = (xr[i] - mean) * inv;
        dx[o * inner + i] = inv * (dr[i] * scale[i] - m1 - xhat * m2);
      }
    }
    from_doubles(ctx.output(0), dx);
    if (ctx.has_output(1)) from_doubles(ctx.output(1), dscale);
    if (ctx.has_output(2)) from_doubles(ctx.output(2), dbias);
  }

 private:
  int64_t axis_;
  float epsilon_;
};

}  // namespace

VOLT_REGISTER_KERNEL(conv_grad, volt_kernel("ConvGrad", make_kernel<ConvGrad>));
VOLT_REGISTER_KERNEL(bias_grad, volt_kernel("BiasGrad", make_kernel<BiasGrad>));
VOLT_REGISTER_KERNEL(pool_grad, volt_kernel("PoolGrad", make_kernel<PoolGrad>));
VOLT_REGISTER_KERNEL(batch_norm_grad, volt_kernel("BatchNormGrad", make_kernel<BatchNormGrad>));
VOLT_REGISTER_KERNEL(layer_norm_grad, volt_kernel("LayerNormGrad", make_kernel<LayerNormGrad>));

}  // namespace volt
