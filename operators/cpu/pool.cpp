// MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool, LpPool. f32/bf16 run on oneDNN's
// pooling primitive, except where volt's loops over stored channels are faster (channel_loop:
// 2-D max and average pools of 8 channels a pixel or more, global averages); the reference loop
// covers other dtypes, MaxPool's Indices output and ceil_mode averaging that counts padding.
// With volt.layout = NHWC (the channels_last pass) the input and output are stored
// channels-last; with NCHW16C or NCHW8C, in blocks of channels (use_blocked_layout).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "operators/common/dispatch.hpp"
#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/float_vectors.hpp"
#include "operators/common/layout.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/simd_clones.hpp"
#include "operators/cpu/conv_geometry.hpp"
#include "operators/registry.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

enum class PoolKind { Max, Average, Lp };

// The taps [first, last) of a window axis that fall inside the input, for the output position
// whose first tap reads input position `base` (negative inside the leading padding).
[[gnu::always_inline]] inline std::pair<int64_t, int64_t> live_taps(int64_t base, int64_t kernel,
                                                                    int64_t dilation, int64_t in) {
  const int64_t first = base >= 0 ? 0 : (-base + dilation - 1) / dilation;
  const int64_t last = in - base <= 0 ? 0 : std::min(kernel, (in - base + dilation - 1) / dilation);
  return {first, std::max(first, last)};
}

// kPixels output pixels of a 2-D max (kMax) or average pool side by side, `pixel_step` floats
// apart in the input (the stride) and `inner` apart in the output, 8 x kVectors channels at a
// time: the running maxima or sums stay in registers over the window's taps and are stored once
// (sums times `scale`). One pixel's are a chain of dependent operations, one per tap, so pixels
// are taken several at a time to keep independent chains in flight (a 3x3 max pool over blocks
// of 8 channels, one pixel at a time: 2.3 ms for [8, 192, 28, 28] on one Zen 3 core, where
// copying it takes 0.3). `inner` >= 8 x kVectors; where it is not a multiple, the last chunk
// overlaps the one before (what it writes again is the same). A max pool passes a NaN input
// over, as by the comparison the reference loop makes; an average keeps it.
template <int64_t kVectors, int64_t kPixels, bool kMax>
[[gnu::always_inline]] inline void pool_pixels(const float* plane, int64_t row_pitch, int64_t inner,
                                               int64_t ih0, std::pair<int64_t, int64_t> rows,
                                               int64_t dh, int64_t iw0, int64_t pixel_step,
                                               std::pair<int64_t, int64_t> cols, int64_t dw,
                                               float scale, float* out) {
  constexpr int64_t kWidth = 8 * kVectors;
  const float start = kMax ? -std::numeric_limits<float>::infinity() : 0.0f;
  for (int64_t c0 = 0; c0 < inner; c0 += kWidth) {
    const int64_t c = std::min(c0, inner - kWidth);
    Floats8 acc[kPixels][kVectors];
    for (auto& pixel : acc)
      for (Floats8& a : pixel) a = Floats8{} + start;
    for (int64_t i = rows.first; i < rows.second; ++i) {
      const float* row = plane + (ih0 + i * dh) * row_pitch + c;
      for (int64_t j = cols.first; j < cols.second; ++j) {
        const float* in = row + (iw0 + j * dw) * inner;
        for (int64_t p = 0; p < kPixels; ++p)
          for (int64_t v = 0; v < kVectors; ++v) {
            Floats8 x;
            load8(x, in + p * pixel_step + 8 * v);
            if constexpr (kMax)
              acc[p][v] = x > acc[p][v] ? x : acc[p][v];
            else
              acc[p][v] += x;
          }
      }
    }
    if constexpr (!kMax)
      for (auto& pixel : acc)
        for (Floats8& a : pixel) a *= scale;
    for (int64_t p = 0; p < kPixels; ++p) std::memcpy(out + p * inner + c, acc[p], sizeof acc[p]);
  }
}

// The same for fewer than 8 channels a pixel, one pixel.
template <bool kMax>
[[gnu::always_inline]] inline void pool_pixel_narrow(const float* plane, int64_t row_pitch,
                                                     int64_t inner, int64_t ih0,
                                                     std::pair<int64_t, int64_t> rows, int64_t dh,
                                                     int64_t iw0, std::pair<int64_t, int64_t> cols,
                                                     int64_t dw, float scale, float* out) {
  for (int64_t c = 0; c < inner; ++c) {
    float acc = kMax ? -std::numeric_limits<float>::infinity() : 0.0f;
    for (int64_t i = rows.first; i < rows.second; ++i)
      for (int64_t j = cols.first; j < cols.second; ++j) {
        const float x = plane[(ih0 + i * dh) * row_pitch + (iw0 + j * dw) * inner + c];
        if constexpr (kMax)
          acc = x > acc ? x : acc;
        else
          acc += x;
      }
    out[c] = kMax ? acc : acc * scale;
  }
}

// An average's divisor: the window's taps inside the input, or with count_include_pad all of
// them (the window never leaves the padded input here: ceil_mode with count_include_pad runs
// the reference loop).
inline float average_scale(std::pair<int64_t, int64_t> rows, std::pair<int64_t, int64_t> cols,
                           const WindowGeometry& w, bool include_pad) {
  const int64_t n = include_pad ? w.kernel[0] * w.kernel[1]
                                : (rows.second - rows.first) * (cols.second - cols.first);
  return n > 0 ? 1.0f / static_cast<float>(n) : 0.0f;
}

// Output pixels of row `oh`, kPixels at a time where the window is whole, one at a time at the
// edges.
template <int64_t kVectors, bool kMax>
[[gnu::always_inline]] inline void pool_row_pixels(const WindowGeometry& w, bool include_pad,
                                                   int64_t inner, const float* plane, int64_t oh,
                                                   float* out_row) {
  constexpr int64_t kPixels = 8 / kVectors;  // eight chains in flight
  const int64_t ih0 = oh * w.strides[0] - w.pad_begin[0], row_pitch = w.in[1] * inner;
  const int64_t dh = w.dilations[0], dw = w.dilations[1], sw = w.strides[1], kw = w.kernel[1];
  const int64_t pad = w.pad_begin[1], out_w = w.out[1];
  const auto rows = live_taps(ih0, w.kernel[0], dh, w.in[0]);
  // The outputs whose window lies inside the row: [whole_begin, whole_end).
  const int64_t whole_begin = std::min(out_w, (pad + sw - 1) / sw);
  const int64_t last_start = w.in[1] - 1 - (kw - 1) * dw + pad;  // largest ow * sw allowed
  const int64_t whole_end =
      std::clamp<int64_t>(last_start < 0 ? 0 : last_start / sw + 1, whole_begin, out_w);
  const float whole_scale = kMax ? 1.0f : average_scale(rows, {0, kw}, w, include_pad);
  // (A lambda for the edge pixels would be compiled once, for the baseline, not in each clone.)
  for (int64_t ow = 0; ow < out_w;) {
    const int64_t iw0 = ow * sw - pad;
    if (ow >= whole_begin && ow + kPixels <= whole_end) {
      pool_pixels<kVectors, kPixels, kMax>(plane, row_pitch, inner, ih0, rows, dh, iw0, sw * inner,
                                           {0, kw}, dw, whole_scale, out_row + ow * inner);
      ow += kPixels;
    } else {
      const auto cols = live_taps(iw0, kw, dw, w.in[1]);
      const float scale = kMax ? 1.0f : average_scale(rows, cols, w, include_pad);
      pool_pixels<kVectors, 1, kMax>(plane, row_pitch, inner, ih0, rows, dh, iw0, 0, cols, dw,
                                     scale, out_row + ow * inner);
      ++ow;
    }
  }
}

template <bool kMax>
[[gnu::always_inline]] inline void pool_row_of(const WindowGeometry& w, bool include_pad,
                                               int64_t inner, const float* plane, int64_t oh,
                                               float* out_row) {
  if (inner >= 32) return pool_row_pixels<4, kMax>(w, include_pad, inner, plane, oh, out_row);
  if (inner >= 16) return pool_row_pixels<2, kMax>(w, include_pad, inner, plane, oh, out_row);
  if (inner >= 8) return pool_row_pixels<1, kMax>(w, include_pad, inner, plane, oh, out_row);
  const int64_t ih0 = oh * w.strides[0] - w.pad_begin[0];
  const auto rows = live_taps(ih0, w.kernel[0], w.dilations[0], w.in[0]);
  for (int64_t ow = 0; ow < w.out[1]; ++ow) {
    const int64_t iw0 = ow * w.strides[1] - w.pad_begin[1];
    const auto cols = live_taps(iw0, w.kernel[1], w.dilations[1], w.in[1]);
    pool_pixel_narrow<kMax>(plane, w.in[1] * inner, inner, ih0, rows, w.dilations[0], iw0, cols,
                            w.dilations[1], average_scale(rows, cols, w, include_pad),
                            out_row + ow * inner);
  }
}

// Output row `oh` of a 2-D max or average pool over one plane of H x W pixels of `inner`
// channels each (channels-last, or a block of channels), stored the same way.
VOLT_SIMD_CLONES void pool_row(const WindowGeometry& w, bool max, bool include_pad, int64_t inner,
                               const float* plane, int64_t oh, float* out_row) {
  if (max) return pool_row_of<true>(w, include_pad, inner, plane, oh, out_row);
  pool_row_of<false>(w, include_pad, inner, plane, oh, out_row);
}

// Sums of `pixels` pixels of `inner` channels each (channels-last, or a block of channels) into
// sums[inner], with the additions in independent vectors rather than in one chain through
// sums[] per pixel: 64 channels at a time in registers down the pixels (the last 64 overlapping
// the ones before), or, for narrower pixels, runs of pixels 64 floats long or more at once.
VOLT_SIMD_CLONES void sum_pixels(const float* x, int64_t pixels, int64_t inner, float* sums) {
  constexpr int64_t kLanes = 64, kRun = 64;
  if (inner < kLanes) {
    const int64_t per_run = (kRun + inner - 1) / inner, run = per_run * inner;
    float acc[kRun + kLanes] = {};
    int64_t p = 0;
    for (; p + per_run <= pixels; p += per_run)
      for (int64_t j = 0; j < run; ++j) acc[j] += x[p * inner + j];
    for (int64_t j = 0; j < (pixels - p) * inner; ++j) acc[j] += x[p * inner + j];
    for (int64_t c = 0; c < inner; ++c) {
      float sum = 0;
      for (int64_t k = 0; k < per_run; ++k) sum += acc[k * inner + c];
      sums[c] = sum;
    }
    return;
  }
  for (int64_t c0 = 0; c0 < inner; c0 += kLanes) {
    const int64_t first = std::min(c0, inner - kLanes);
    float acc[kLanes] = {};
    for (int64_t p = 0; p < pixels; ++p)
      for (int64_t c = 0; c < kLanes; ++c) acc[c] += x[p * inner + first + c];
    for (int64_t c = c0 - first; c < kLanes; ++c) sums[first + c] = acc[c];
  }
}

// y[plane][c] = scale * (the sum over bands of sums[plane][band][c]), bands added in order. y
// may be `sums` itself when there is one band.
VOLT_SIMD_CLONES void add_bands_and_scale(const float* sums, int64_t planes, int64_t bands,
                                          int64_t inner, float scale, float* y) {
  for (int64_t plane = 0; plane < planes; ++plane) {
    const float* part = sums + plane * bands * inner;
    float* out = y + plane * inner;
    if (out != part)
      for (int64_t c = 0; c < inner; ++c) out[c] = part[c];
    for (int64_t b = 1; b < bands; ++b)
      for (int64_t c = 0; c < inner; ++c) out[c] += part[b * inner + c];
    for (int64_t c = 0; c < inner; ++c) out[c] *= scale;
  }
}

struct PoolShapes {
  WindowGeometry win;
  Shape out;
};

class Pool final : public Kernel {
 public:
  Pool(const Node& n, PoolKind kind, bool global)
      : attrs_(n),
        kind_(kind),
        global_(global),
        count_include_pad_(n.attr_int("count_include_pad", 0) != 0),
        storage_order_(n.attr_int("storage_order", 0)),
        p_(n.attr_int("p", 2)),
        layout_(stored_layout(n)),
        last_(layout_ != StoredLayout::ChannelsFirst) {
    if (!global_)
      VOLT_CHECK(!attrs_.kernel_shape.empty(), InvalidModel,
                 n.describe() + ": kernel_shape is required");
  }

  void infer(InferContext& ctx) const override {
    const Shape x = logical_shape(ctx.shape(0), last_, ctx.node());
    const PoolShapes s = shapes(x, ctx.node());
    ctx.set_output(0, ctx.dtype(0), last_ ? to_channels_last(s.out) : s.out);
    if (ctx.output_count() > 1 && ctx.node().has_output(1)) {
      VOLT_CHECK(!last_, InvalidModel, ctx.node().describe() + ": Indices need NCHW layout");
      ctx.set_output(1, DType::Int64, s.out);
      return ctx.runs_reference_loop("MaxPool's Indices output");
    }
    const DType dt = ctx.dtype(0);
    if (numel_of(s.out) == 0) return;
    if (dt != DType::Float && dt != DType::BFloat16)
      return ctx.runs_reference_loop(std::string("dtype ") + dtype_name(dt));
    if (kind_ == PoolKind::Lp) return ctx.runs_reference_loop("LpPool");
    if (s.win.in.size() > 3) return ctx.runs_reference_loop("more than 3 spatial axes");
    if (attrs_.ceil_mode && kind_ == PoolKind::Average && count_include_pad_)
      return ctx.runs_reference_loop("ceil_mode averaging that counts padding");
    if (auto st = channel_loop(ctx, s, x)) return ctx.set_state(st);
    try {
      ctx.set_state(prepare(ctx, s, x));
    } catch (const KernelUnsupported& u) {
      ctx.runs_reference_loop(u.reason);
    }
  }

  void run(RunContext& ctx) const override {
    if (const auto* st = static_cast<const PoolState*>(ctx.state_ptr())) {
      if (st->loop)
        return run_channel_loop(*st, ctx.input(0).data<float>(), ctx.output(0).data<float>(),
                                static_cast<float*>(ctx.scratch()));
      if (st->plain)
        return run_plain_planes(*st, ctx.input(0).data<float>(), ctx.output(0).data<float>());
      dnnl_adapter::execute(st->prim,
                            {{DNNL_ARG_SRC, st->src, ctx.input(0).raw()},
                             {DNNL_ARG_DST, st->dst, ctx.output(0).raw()}},
                            st->scratch, ctx.scratch());
      return;
    }
    int64_t* indices = ctx.has_output(1) ? ctx.output(1).data<int64_t>() : nullptr;
    if (!last_) return run_reference(ctx, ctx.input(0), ctx.output(0), indices);
    // Channels-last without a primitive: the reference loop on channels-first copies.
    const Tensor x = channels_first_copy(ctx.input(0), layout_);
    Tensor y = allocate_tensor(x.dtype(), to_channels_first(ctx.output(0).shape()));
    run_reference(ctx, x, y, nullptr);
    write_stored(y, layout_, ctx.output(0));
  }

 private:
  void run_reference(RunContext& ctx, const Tensor& x, Tensor& y, int64_t* indices) const {
    const PoolShapes s = shapes(x.shape(), ctx.node());
    dispatch_numeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, bool>) {
        ctx.error("does not apply to bool");
      } else {
        reference(s, x.shape(), static_cast<const T*>(x.raw()), static_cast<T*>(y.raw()), indices);
      }
    });
  }

  struct PoolState {
    dnnl::pooling_v2_forward prim;
    dnnl::memory::desc src, dst, scratch;
    // Or, without a primitive, volt's loop over stored channels (channel_loop): `planes` of
    // H x W pixels of `inner` channels each.
    bool loop = false, global_mean = false, max = true, include_pad = false;
    bool plain = false;  // volt's loop over channels-first planes (plain_planes)
    WindowGeometry win;
    // A max pool of a wide window moving one column at a time, as two passes per output row
    // (separable_max): each column's maximum over the window's rows (`columns`), then each
    // output's over its columns of those (`across`).
    bool separable = false;
    WindowGeometry columns, across;
    int64_t planes = 0, inner = 0, bands = 1;
  };

  // An f32 MaxPool or AveragePool (not global) of 1 to 3 spatial axes over channels-first data
  // where oneDNN 2.6 offers only its scalar simple_nchw kernel (1-D windows, 2-D ones of one
  // row: a 1-D max pool of [8, 256, 4000] took 58 ms, ONNX Runtime 4.7). Planes across the
  // threads; each axis's live taps per output position computed once; the results as the
  // reference loop's (a max starts from its first live tap, NaN included; averages over the
  // live or the padded taps).
  std::shared_ptr<PoolState> plain_planes(InferContext& ctx, const PoolShapes& s,
                                          const Shape& x) const {
    if (last_ || global_ || ctx.dtype(0) != DType::Float || kind_ == PoolKind::Lp ||
        s.win.in.size() > 3)
      return nullptr;
    auto st = std::make_shared<PoolState>();
    st->plain = true;
    st->max = kind_ == PoolKind::Max;
    st->include_pad = count_include_pad_;
    st->win = s.win;
    // (Padded to three axes at the front: D, H, W.)
    auto& w = st->win;
    while (w.in.size() < 3) {
      for (auto* v : {&w.kernel, &w.strides, &w.dilations, &w.in, &w.out}) v->insert(v->begin(), 1);
      for (auto* v : {&w.pad_begin, &w.pad_end}) v->insert(v->begin(), 0);
    }
    st->planes = x[0] * x[1];
    return st;
  }

  static void run_plain_planes(const PoolState& st, const float* x, float* y) {
    const WindowGeometry& w = st.win;
    const int64_t in_plane = w.in[0] * w.in[1] * w.in[2],
                  out_plane = w.out[0] * w.out[1] * w.out[2];
    // Per output position on an axis: its first input position, live taps [first, last), and
    // the taps inside input + padding (an average's count with count_include_pad).
    struct Span {
      int64_t base, first, last, padded;
    };
    auto spans = [&](size_t a) {
      std::vector<Span> v(static_cast<size_t>(w.out[a]));
      for (int64_t o = 0; o < w.out[a]; ++o) {
        const int64_t base = o * w.strides[a] - w.pad_begin[a];
        const auto [f, l] = live_taps(base, w.kernel[a], w.dilations[a], w.in[a]);
        int64_t padded = 0;
        for (int64_t t = 0; t < w.kernel[a]; ++t)
          padded += base + t * w.dilations[a] < w.in[a] + w.pad_end[a];
        v[static_cast<size_t>(o)] = {base, f, l, padded};
      }
      return v;
    };
    const auto sd = spans(0), sh = spans(1), sw = spans(2);
    const int64_t dd = w.dilations[0], dh = w.dilations[1], dw = w.dilations[2];
    // The outputs of the last axis whose taps are all live: [w_lo, w_hi).
    int64_t w_lo = 0, w_hi = 0;
    for (int64_t o = 0; o < w.out[2]; ++o)
      if (sw[static_cast<size_t>(o)].first == 0 && sw[static_cast<size_t>(o)].last == w.kernel[2]) {
        if (w_hi == w_lo) w_lo = o;
        w_hi = o + 1;
      }
    auto planes = [&](auto max_tag) {
      constexpr bool kMax = decltype(max_tag)::value;
      parallel_for(st.planes, st.planes > 1 && st.planes * out_plane > 4096, [&](int64_t p) {
        const float* in = x + p * in_plane;
        float* out = y + p * out_plane;
        for (const Span& a : sd)
          for (const Span& b : sh) {
            const int64_t rows = (a.last - a.first) * (b.last - b.first);
            // The input row of the first live (D, H) tap, and the step to the others.
            const float* first_row =
                in + ((a.base + a.first * dd) * w.in[1] + b.base + b.first * dh) * w.in[2];
            auto each_row = [&](auto&& f) {
              for (int64_t i = 0; i < a.last - a.first; ++i)
                for (int64_t j = 0; j < b.last - b.first; ++j)
                  f(first_row + (i * dd * w.in[1] + j * dh) * w.in[2]);
            };
            auto finish = [&](float acc, const Span& c, int64_t taps) {
              if constexpr (kMax) {
                return acc;
              } else {
                const int64_t count = st.include_pad ? a.padded * b.padded * c.padded
                                                     : std::max<int64_t>(rows * taps, 1);
                return acc / static_cast<float>(count);
              }
            };
            // Edge outputs one at a time.
            auto one = [&](int64_t o) {
              const Span& c = sw[static_cast<size_t>(o)];
              const int64_t taps = c.last - c.first;
              float acc = 0.0f;
              if constexpr (kMax)
                acc = rows * taps > 0 ? first_row[c.base + c.first * dw]
                                      : std::numeric_limits<float>::lowest();
              each_row([&](const float* row) {
                for (int64_t k = c.first; k < c.last; ++k) {
                  const float v = row[c.base + k * dw];
                  if constexpr (kMax)
                    acc = v > acc ? v : acc;
                  else
                    acc += v;
                }
              });
              out[o] = finish(acc, c, taps);
            };
            for (int64_t o = 0; o < w_lo; ++o) one(o);
            // The interior a tap at a time across the outputs, in loops the compiler vectorizes
            // (a max starts from the first tap, as the scan does).
            if (w_hi > w_lo) {
              const int64_t n = w_hi - w_lo, sx = w.strides[2];
              const float* base = first_row + sw[static_cast<size_t>(w_lo)].base;
              float* o = out + w_lo;
              if constexpr (kMax) {
                if (rows > 0)
                  for (int64_t i = 0; i < n; ++i) o[i] = base[i * sx];
                else
                  std::fill(o, o + n, std::numeric_limits<float>::lowest());
              } else {
                std::fill(o, o + n, 0.0f);
              }
              each_row([&](const float* row) {
                const float* r0 = row + sw[static_cast<size_t>(w_lo)].base;
                for (int64_t k = 0; k < w.kernel[2]; ++k) {
                  const float* t = r0 + k * dw;
                  if constexpr (kMax) {
                    for (int64_t i = 0; i < n; ++i) o[i] = t[i * sx] > o[i] ? t[i * sx] : o[i];
                  } else {
                    for (int64_t i = 0; i < n; ++i) o[i] += t[i * sx];
                  }
                }
              });
              if constexpr (!kMax)
                for (int64_t i = 0; i < n; ++i)
                  o[i] = finish(o[i], sw[static_cast<size_t>(w_lo + i)], w.kernel[2]);
            }
            for (int64_t o = w_hi; o < w.out[2]; ++o) one(o);
            out += w.out[2];
          }
      });
    };
    if (st.max)
      planes(std::true_type{});
    else
      planes(std::false_type{});
  }

  // A 2-D f32 MaxPool or AveragePool over channels-last or blocked data of 8 channels a pixel or
  // more runs volt's loop (pool_row: the window's maxima or sums for 8 pixels' channels at a
  // time, held in registers). oneDNN 2.6's jit pooling on AVX2 runs one pixel's chain at a time;
  // GoogLeNet's 13 max pools at batch 8, 2 threads, Zen 3, took 31-47 ms a run against ONNX
  // Runtime's 7 (per node 1.6-4.4 ms against 0.2-1.7). Per node with the loop, alternating: a 3x3
  // max pool of [8, 192, 28, 28] in blocks of 8, 2.7 -> 0.7 ms; ResNet-18 batch 8's 4.1-4.3 ->
  // 2.3-2.7 ms; a 2x2 stride-2 average pool of [8, 128, 56, 56] channels-last (DenseNet's
  // first transition) 4.7-5.1 -> 2.9-3.3 ms. With fewer channels a pixel, oneDNN's primitive
  // stays, except in a plan built for one of several shapes: there the loop takes any
  // channels-last or blocked data, since it needs no code generated per shape (oneDNN's pooling
  // primitive costs about 80 us at each new shape, crnn_recognizer has four). A f32
  // GlobalAveragePool always runs the loop (run_global_mean): over channels-first data each
  // channel's plane is one contiguous run, summed as pixels of a single channel (oneDNN's
  // pooling took 0.70 ms over an audio model's [1, 512, 3199], ONNX Runtime 0.24).
  std::shared_ptr<PoolState> channel_loop(InferContext& ctx, const PoolShapes& s,
                                          const Shape& x) const {
    const bool global_mean = global_ && kind_ == PoolKind::Average;
    const bool plane_mean = !last_ && global_mean;
    const int64_t block = block_channels(layout_), inner = plane_mean ? 1 : (block ? block : x[1]);
    const bool loop_wins = ctx.shapes_vary() || inner >= 8;
    if (!(last_ || plane_mean) || ctx.dtype(0) != DType::Float ||
        !(global_mean || (loop_wins && kind_ != PoolKind::Lp && s.win.in.size() == 2)))
      return nullptr;
    auto st = std::make_shared<PoolState>();
    st->loop = true;
    st->max = kind_ == PoolKind::Max;
    st->include_pad = count_include_pad_;
    st->global_mean = global_mean;
    st->win = s.win;
    st->inner = inner;
    st->planes = x[0] * (x[1] / st->inner);
    if (!global_mean && st->max) separable_max(*st);
    if (global_mean) {
      // Bands of about 32 KiB of pixels, so that both threads share an image (batch 1); their
      // number depends on the shape alone, so the result does not depend on the threads.
      const int64_t pixels = numel_of(s.win.in);
      st->bands = std::clamp<int64_t>(pixels * st->inner / 8192, 1, std::max<int64_t>(pixels, 1));
      st->bands = std::min<int64_t>(st->bands, 64);
      // The bands' sums, in the node's scratch (one band writes the output directly).
      if (st->bands > 1)
        ctx.request_scratch(static_cast<size_t>(st->planes * st->bands * st->inner) *
                            sizeof(float));
    }
    return st;
  }

  // GlobalAveragePool over channels-last or blocked f32 data: each band of an image's pixels is
  // summed over contiguous rows of channels, in parallel, then the bands in order. oneDNN's
  // pooling gives each thread whole blocks of 16 channels of an image, so at batch 1 a narrow
  // image (32 channels) has two work items and each walks every pixel. Medians per run of
  // `volt bench --profile`, 2 threads, all of a model's GlobalAveragePools, oneDNN -> this loop:
  // EfficientNet-B0 batch 1 668 -> 207 us (its 112x112x32 one 155 -> 45), RegNetY-400MF batch 1
  // 263 -> 107, MobileNetV3-Large batch 1 220 -> 91, ResNet-18 batch 8 (blocked) 126 -> 68,
  // MobileNetV3-Small batch 8 188 -> 169, EfficientNet-B0 batch 8 3.02 -> 2.94 ms.
  static void run_global_mean(const PoolState& st, const float* x, float* y, float* scratch) {
    const int64_t pixels = numel_of(st.win.in), inner = st.inner, bands = st.bands;
    float* sums = bands > 1 ? scratch : y;
    parallel_for(st.planes * bands, st.planes * pixels * inner > 32768, [&](int64_t item) {
      const int64_t plane = item / bands, band = item % bands;
      const int64_t p0 = pixels * band / bands, p1 = pixels * (band + 1) / bands;
      sum_pixels(x + (plane * pixels + p0) * inner, p1 - p0, inner, sums + item * inner);
    });
    add_bands_and_scale(sums, st.planes, bands, inner,
                        1.0f / static_cast<float>(std::max<int64_t>(pixels, 1)), y);
  }

  // The max over a kh x kw window is the max over kw columns of each column's max over kh
  // rows: kh + kw - 2 comparisons an output instead of kh kw - 1, where the window moves one
  // column at a time (each column's max serves kw outputs). The result is the same: a max over
  // the same values, NaN passed over as in pool_pixels. Small windows are bound by memory, and
  // the column maxima's row written and read again costs more than the comparisons saved (AVX2
  // EPYC, 2 threads, batch 8, 256 channels of 20x20 in blocks of 8: 5x5 0.45 -> 0.83-0.98 ms;
  // 3x3 over GoogLeNet's 192 x 28 x 28 0.40 -> 0.56); from 7x7 on it wins (7x7 1.28-1.32 ->
  // 0.68-1.21, 9x9 1.81-1.88 -> 1.29-1.49, a detector's 13x13 pyramid pool 3.44-3.46 ->
  // 0.90-1.67).
  static void separable_max(PoolState& st) {
    constexpr int64_t kMinSide = 7;
    const WindowGeometry& w = st.win;
    if (w.in.size() != 2 || w.strides[1] != 1 || w.kernel[0] < kMinSide || w.kernel[1] < kMinSide ||
        st.inner < 8)
      return;
    st.separable = true;
    st.columns = w;  // a window of kh rows and one column, over every column of X
    st.columns.kernel[1] = 1;
    st.columns.dilations[1] = 1;
    st.columns.pad_begin[1] = st.columns.pad_end[1] = 0;
    st.columns.out[1] = w.in[1];
    st.across = w;  // one row of those maxima, a window of one row and kw columns
    st.across.in[0] = st.across.out[0] = 1;
    st.across.kernel[0] = st.across.strides[0] = st.across.dilations[0] = 1;
    st.across.pad_begin[0] = st.across.pad_end[0] = 0;
  }

  static void run_channel_loop(const PoolState& st, const float* x, float* y, float* scratch) {
    if (st.global_mean) return run_global_mean(st, x, y, scratch);
    const WindowGeometry& w = st.win;
    const int64_t ho = w.out[0];
    if (st.separable) {
      const size_t column_maxima = static_cast<size_t>(w.in[1] * st.inner);
      parallel_for(st.planes * ho, st.planes * ho * w.out[1] * st.inner > 32768, [&](int64_t row) {
        thread_local std::vector<float> maxima;  // (each worker's own: no allocation per run)
        if (maxima.size() < column_maxima) maxima.resize(column_maxima);
        pool_row(st.columns, true, false, st.inner, x + row / ho * w.in[0] * w.in[1] * st.inner,
                 row % ho, maxima.data());
        pool_row(st.across, true, false, st.inner, maxima.data(), 0, y + row * w.out[1] * st.inner);
      });
      return;
    }
    parallel_for(st.planes * ho, st.planes * ho * w.out[1] * st.inner > 32768, [&](int64_t row) {
      pool_row(w, st.max, st.include_pad, st.inner, x + row / ho * w.in[0] * w.in[1] * st.inner,
               row % ho, y + row * w.out[1] * st.inner);
    });
  }

  PoolShapes shapes(const Shape& x, const Node& node) const {
    VOLT_CHECK(x.size() >= 3, InvalidArgument,
               node.describe() + ": input must be N x C x spatial..., got " + shape_str(x));
    const std::vector<int64_t> spatial(x.begin() + 2, x.end());
    PoolShapes s;
    if (global_) {
      WindowAttributes a = attrs_;
      a.pads.clear();
      a.strides.clear();
      a.auto_pad = "NOTSET";
      s.win = resolve_window(a, spatial, spatial, node);
    } else {
      s.win = resolve_window(attrs_, spatial, attrs_.kernel_shape, node);
    }
    s.out = {x[0], x[1]};
    s.out.insert(s.out.end(), s.win.out.begin(), s.win.out.end());
    return s;
  }

  std::shared_ptr<PoolState> prepare(InferContext& ctx, const PoolShapes& s, const Shape& x) const {
    return dnnl_adapter::guarded(ctx.node(), [&] {
      using dims = dnnl::memory::dims;
      auto st = std::make_shared<PoolState>();
      const auto dt = dnnl_adapter::to_dnnl(ctx.dtype(0));
      st->src = activation_md(x, dt, layout_);
      st->dst = activation_md(s.out, dt, layout_);
      dims strides(s.win.strides.begin(), s.win.strides.end()),
          kernel(s.win.kernel.begin(), s.win.kernel.end()),
          pl(s.win.pad_begin.begin(), s.win.pad_begin.end()), pr, dil;
      for (size_t i = 0; i < s.win.in.size(); ++i) {
        const int64_t eff = (s.win.kernel[i] - 1) * s.win.dilations[i] + 1;
        // Right padding that makes oneDNN's floor formula give ceil_mode's size.
        pr.push_back(std::max<int64_t>(
            s.win.pad_end[i],
            (s.win.out[i] - 1) * s.win.strides[i] + eff - s.win.in[i] - s.win.pad_begin[i]));
        dil.push_back(s.win.dilations[i] - 1);
      }
      const auto alg = kind_ == PoolKind::Max ? dnnl::algorithm::pooling_max
                       : count_include_pad_   ? dnnl::algorithm::pooling_avg_include_padding
                                              : dnnl::algorithm::pooling_avg_exclude_padding;
      dnnl::pooling_v2_forward::desc d(dnnl::prop_kind::forward_inference, alg, st->src, st->dst,
                                       strides, kernel, dil, pl, pr);
      dnnl::pooling_v2_forward::primitive_desc pd(d, dnnl_adapter::scratch_attr(),
                                                  dnnl_adapter::engine());
      const std::string impl = pd.impl_info_str();
      if (impl.rfind("simple", 0) == 0 || dnnl_adapter::is_reference(pd))
        if (auto plain = plain_planes(ctx, s, x)) return plain;
      if (dnnl_adapter::is_reference(pd)) ctx.runs_reference_loop(std::string("oneDNN ") + impl);
      st->prim = dnnl::pooling_v2_forward(pd);
      st->scratch = pd.scratchpad_desc();
      ctx.request_scratch(st->scratch.get_size());
      return st;
    });
  }

  template <class T>
  void reference(const PoolShapes& s, const Shape& xs, const T* x, T* y, int64_t* indices) const {
    using C = typename Compute<T>::type;
    const size_t r = s.win.in.size();
    const int64_t planes = xs[0] * xs[1];
    const int64_t in_sp = numel_of(s.win.in), out_sp = numel_of(s.win.out),
                  k_sp = numel_of(s.win.kernel);
    // The taps of output position op that fall inside the input (flat offsets, in kernel
    // order) and how many fall inside input + padding.
    auto taps_of = [&](int64_t op, std::vector<int64_t>& taps, int64_t& padded_count) {
      std::vector<int64_t> o(r), k(r);
      int64_t rem = op;
      for (size_t d = r; d-- > 0;) {
        o[d] = rem % s.win.out[d];
        rem /= s.win.out[d];
      }
      padded_count = 0;
      for (int64_t kp = 0; kp < k_sp; ++kp) {
        int64_t krem = kp;
        for (size_t d = r; d-- > 0;) {
          k[d] = krem % s.win.kernel[d];
          krem /= s.win.kernel[d];
        }
        bool inside = true, in_padded = true;
        int64_t off = 0;
        for (size_t d = 0; d < r; ++d) {
          const int64_t pos =
              o[d] * s.win.strides[d] - s.win.pad_begin[d] + k[d] * s.win.dilations[d];
          inside &= pos >= 0 && pos < s.win.in[d];
          in_padded &= pos < s.win.in[d] + s.win.pad_end[d];
          off = off * s.win.in[d] + pos;
        }
        padded_count += in_padded;
        if (inside) taps.push_back(off);
      }
    };
    // Computed once for all planes where the table is of reasonable size (found by fuzzing: a
    // 21x13 window over 126 planes took seconds when every plane redid the index arithmetic).
    int64_t table = 0;
    const bool shared =
        !__builtin_mul_overflow(out_sp, k_sp, &table) && table <= (int64_t{1} << 22);
    std::vector<int64_t> first, all_taps, all_padded;
    if (shared) {
      first.assign(static_cast<size_t>(out_sp) + 1, 0);
      all_padded.resize(static_cast<size_t>(out_sp));
      for (int64_t op = 0; op < out_sp; ++op) {
        taps_of(op, all_taps, all_padded[op]);
        first[op + 1] = static_cast<int64_t>(all_taps.size());
      }
    }
#pragma omp parallel for
    for (int64_t plane = 0; plane < planes; ++plane) {
      std::vector<int64_t> own;
      for (int64_t op = 0; op < out_sp; ++op) {
        int64_t padded_count = 0;
        const int64_t* taps;
        int64_t n_taps;
        if (shared) {
          taps = all_taps.data() + first[op];
          n_taps = first[op + 1] - first[op];
          padded_count = all_padded[op];
        } else {
          own.clear();
          taps_of(op, own, padded_count);
          taps = own.data();
          n_taps = static_cast<int64_t>(own.size());
        }
        C acc = kind_ == PoolKind::Max ? std::numeric_limits<C>::lowest() : C(0);
        int64_t arg = -1;
        const int64_t counted = n_taps;
        for (int64_t t = 0; t < n_taps; ++t) {
          const int64_t off = taps[t];
          const C v = static_cast<C>(x[plane * in_sp + off]);
          if (kind_ == PoolKind::Max) {
            if (v > acc || arg < 0) {
              acc = v;
              arg = off;
            }
          } else if (kind_ == PoolKind::Lp) {
            acc += static_cast<C>(std::pow(v < C(0) ? C(-v) : v, static_cast<C>(p_)));
          } else {
            acc += v;
          }
        }
        C result = acc;
        if (kind_ == PoolKind::Average)
          result = acc / static_cast<C>(count_include_pad_ ? padded_count
                                                           : std::max<int64_t>(counted, 1));
        if (kind_ == PoolKind::Lp)
          result = static_cast<C>(std::pow(acc, C(1) / static_cast<C>(p_)));
        y[plane * out_sp + op] = static_cast<T>(result);
        if (indices) {
          // Indices are flat over the whole input, row-major unless storage_order = 1.
          int64_t flat = arg;
          if (storage_order_ == 1 && r == 2)
            flat = (arg % s.win.in[1]) * s.win.in[0] + arg / s.win.in[1];
          indices[plane * out_sp + op] = plane * in_sp + flat;
        }
      }
    }
  }

  WindowAttributes attrs_;
  PoolKind kind_;
  bool global_;
  bool count_include_pad_;
  int64_t storage_order_;
  int64_t p_;
  StoredLayout layout_;  // of the input and output
  bool last_;            // stored in channels-last shapes
};

KernelDef pool(const char* op, PoolKind kind, bool global) {
  return {.op = op, .types = kNumericTypes, .create = [=](const Node& n) {
            return std::make_unique<Pool>(n, kind, global);
          }};
}

}  // namespace

VOLT_REGISTER_KERNEL(max_pool, pool("MaxPool", PoolKind::Max, false));
VOLT_REGISTER_KERNEL(average_pool, pool("AveragePool", PoolKind::Average, false));
VOLT_REGISTER_KERNEL(lp_pool, pool("LpPool", PoolKind::Lp, false));
VOLT_REGISTER_KERNEL(global_average_pool, pool("GlobalAveragePool", PoolKind::Average, true));
VOLT_REGISTER_KERNEL(global_max_pool, pool("GlobalMaxPool", PoolKind::Max, true));
VOLT_REGISTER_KERNEL(global_lp_pool, pool("GlobalLpPool", PoolKind::Lp, true));

}  // namespace volt
