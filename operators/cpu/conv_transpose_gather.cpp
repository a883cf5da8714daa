#include "operators/cpu/conv_transpose_gather.hpp"

#include <algorithm>

#include "operators/common/own_activation.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/simd_clones.hpp"

namespace volt {
namespace {

TapList tap_list(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t dilation,
                 int64_t pad_begin) {
  TapList t;
  t.start.reserve(static_cast<size_t>(out + 1));
  for (int64_t o = 0; o < out; ++o) {
    t.start.push_back(static_cast<int64_t>(t.items.size()));
    for (int64_t k = 0; k < kernel; ++k) {
      const int64_t at = o + pad_begin - k * dilation;  // = input position x stride
      if (at >= 0 && at % stride == 0 && at / stride < in) t.items.emplace_back(k, at / stride);
    }
  }
  t.start.push_back(static_cast<int64_t>(t.items.size()));
  return t;
}

bool one_each(const TapList& t) {
  for (size_t o = 0; o + 1 < t.start.size(); ++o)
    if (t.start[o + 1] - t.start[o] != 1) return false;
  return true;
}

// to[k x to_step + e] += from[k x from_step + e] for k < count, e < len (= kLen where not 0).
template <int64_t kLen>
[[gnu::always_inline]] inline void add_runs(const float* __restrict from, int64_t from_step,
                                            float* __restrict to, int64_t to_step, int64_t count,
                                            int64_t len) {
  const int64_t n = kLen ? kLen : len;
  for (int64_t k = 0; k < count; ++k)
    for (int64_t e = 0; e < n; ++e) to[k * to_step + e] += from[k * from_step + e];
}

// Output row `item` ([n][run][oh]) of gather_taps, as col2im over the row: each tap's values
// added into the outputs it reaches, the row being this item's alone. Plain code, so that it is
// compiled for each SIMD target (the parallel region around it is not).
VOLT_SIMD_CLONES void gather_row(const TapGather& p, const float* z, const float* bias,
                                 const FusedActivation& act, int64_t item, float* y) {
  const int64_t run = p.run, sw = p.stride_w, dw = p.dilation_w, pw = p.pad_w;
  const int64_t n = item / (p.runs * p.out_h), r = item / p.out_h % p.runs, oh = item % p.out_h;
  const float* image = z + n * p.z_image;
  float* __restrict out_row = y + item * p.out_w * run;  // [n][r][oh] rows are consecutive
  for (int64_t ow = 0; ow < p.out_w; ++ow)
    for (int64_t e = 0; e < run; ++e) out_row[ow * run + e] = bias ? bias[r * run + e] : 0.0f;
  for (int64_t a = p.rows.start[static_cast<size_t>(oh)];
       a < p.rows.start[static_cast<size_t>(oh) + 1]; ++a) {
    const auto [i, h] = p.rows.items[static_cast<size_t>(a)];
    const float* in_row = image + h * p.in_w * p.z_pixel;
    for (int64_t j = 0; j < p.kw; ++j) {
      // The input columns whose output w x sw - pw + j x dw lies in [0, out_w).
      const int64_t first = pw - j * dw;  // w x sw >= first
      const int64_t w0 = first <= 0 ? 0 : (first + sw - 1) / sw;
      const int64_t last = p.out_w - 1 + pw - j * dw;  // w x sw <= last
      const int64_t w1 = last < 0 ? 0 : std::min(p.in_w, last / sw + 1);
      if (w1 <= w0) continue;
      const size_t s = static_cast<size_t>(r * p.taps + i * p.kw + j);
      for (int64_t k = p.seg_start[s]; k < p.seg_start[s + 1]; ++k) {
        const TapSegment seg = p.segments[static_cast<size_t>(k)];
        const float* from = in_row + w0 * p.z_pixel + seg.src;
        float* to = out_row + (w0 * sw - pw + j * dw) * run + seg.dst;
        const int64_t count = w1 - w0, to_step = sw * run;
        if (seg.len == 8) {  // blocks of 8 and 16: the length known to the compiler
          add_runs<8>(from, p.z_pixel, to, to_step, count, 8);
        } else if (seg.len == 16) {
          add_runs<16>(from, p.z_pixel, to, to_step, count, 16);
        } else {
          add_runs<0>(from, p.z_pixel, to, to_step, count, seg.len);
        }
      }
    }
  }
  apply_activation(act, out_row, p.out_w * run);
}

}  // namespace

TapGather tap_gather(const DeconvGeometry& g, int64_t block) {
  TapGather p;
  const int64_t mg = g.m / g.group, taps = g.kernel[0] * g.kernel[1], zc = g.m * taps;
  if (block && mg % block != 0) return p;
  p.n = g.n;
  p.m = g.m;
  p.group_m = mg;
  p.kw = g.kernel[1];
  p.taps = taps;
  p.in_h = g.in[0];
  p.in_w = g.in[1];
  p.out_h = g.out[0];
  p.out_w = g.out[1];
  p.run = block ? block : g.m;
  p.runs = g.m / p.run;
  p.z_pixel = block ? block : zc;
  p.z_image = p.in_h * p.in_w * zc;
  p.rows = tap_list(g.in[0], g.out[0], g.kernel[0], g.strides[0], g.dilations[0], g.pad_begin[0]);
  p.one_tap_each =
      one_each(p.rows) && one_each(tap_list(g.in[1], g.out[1], g.kernel[1], g.strides[1],
                                            g.dilations[1], g.pad_begin[1]));
  p.stride_w = g.strides[1];
  p.dilation_w = g.dilations[1];
  p.pad_w = g.pad_begin[1];
  for (int64_t r = 0; r < p.runs; ++r)
    for (int64_t tap = 0; tap < taps; ++tap) {
      p.seg_start.push_back(static_cast<int64_t>(p.segments.size()));
      if (block) {  // one group's block: Z's channel c0 .. c0 + B, whole block c0 / B
        const int64_t grp = r * block / mg;
        const int64_t c0 = grp * taps * mg + tap * mg + (r * block - grp * mg);
        p.segments.push_back({0, c0 / block * p.in_h * p.in_w * block, block});
      } else {
        for (int64_t grp = 0; grp < g.group; ++grp)
          p.segments.push_back({grp * mg, grp * taps * mg + tap * mg, mg});
      }
    }
  p.seg_start.push_back(static_cast<int64_t>(p.segments.size()));
  return p;
}

void gather_taps(const TapGather& p, const float* z, const float* bias, const FusedActivation& act,
                 float* y) {
  parallel_for(p.n * p.runs * p.out_h, true,
               [&](int64_t item) { gather_row(p, z, bias, act, item, y); });
}

}  // namespace volt
