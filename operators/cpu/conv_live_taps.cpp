#include "operators/cpu/conv_live_taps.hpp"

#include <cstring>

#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/gemm_weights.hpp"
#include "operators/common/layout.hpp"

namespace volt {
namespace {

// The outputs [first, last) along one axis whose input coordinate for tap `k` lies inside.
std::pair<int64_t, int64_t> live_outputs(const WindowGeometry& g, size_t d, int64_t k) {
  const int64_t offset = k * g.dilations[d] - g.pad_begin[d], stride = g.strides[d];
  // o * stride + offset >= 0 and < in
  int64_t first = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  int64_t last = g.in[d] - offset <= 0 ? 0 : (g.in[d] - offset + stride - 1) / stride;
  last = std::min(last, g.out[d]);
  first = std::min(first, last);
  return {first, last};
}

}  // namespace

std::shared_ptr<LiveTapProducts> plan_live_tap_products(InferContext& ctx, const ConvShapes& s,
                                                        const Tensor& w, bool has_bias,
                                                        const FusedActivation& act,
                                                        const dnnl::memory::desc& stored_x,
                                                        const dnnl::memory::desc& stored_y) {
  const WindowGeometry& g = s.win;
  if (g.in.size() != 2 || s.group != 1) return nullptr;
  const int64_t kh = g.kernel[0], kw = g.kernel[1];
  struct Tap {
    int64_t ky, kx;
    std::pair<int64_t, int64_t> rows, cols;
    int64_t outputs() const { return (rows.second - rows.first) * (cols.second - cols.first); }
  };
  std::vector<Tap> partial;
  std::optional<Tap> full;
  int64_t live = 0;
  const int64_t outputs = g.out[0] * g.out[1];
  for (int64_t ky = 0; ky < kh; ++ky)
    for (int64_t kx = 0; kx < kw; ++kx) {
      const Tap t{ky, kx, live_outputs(g, 0, ky), live_outputs(g, 1, kx)};
      if (t.outputs() == 0) continue;
      live += t.outputs();
      if (t.outputs() == outputs && !full)
        full = t;
      else
        partial.push_back(t);
    }
  // Each product reads X and writes Y once more: worth it where it saves half the arithmetic of
  // the direct convolution over the taps some output reads (the live window, which the direct
  // path keeps: a 3x3 over a map one column wide is a 3x1 there).
  auto live_taps = [&](size_t d, int64_t k) {
    int64_t count = 0;
    for (int64_t t = 0; t < k; ++t) {
      const auto [first, last] = live_outputs(g, d, t);
      count += first < last;
    }
    return count;
  };
  const int64_t window = live_taps(0, kh) * live_taps(1, kw);
  if (!full || partial.empty() || 2 * live > window * outputs) return nullptr;
  return dnnl_adapter::guarded(ctx.node(), [&]() -> std::shared_ptr<LiveTapProducts> {
    using dt = dnnl::memory::data_type;
    const int64_t n = s.n, c = s.c, m = s.m, ih = g.in[0], iw = g.in[1], oh = g.out[0],
                  ow = g.out[1];
    auto p = std::make_shared<LiveTapProducts>();
    size_t scratch = 0;  // the products' (one at a time), then the staged X and Y
    p->y_floats = static_cast<size_t>(n * oh * ow * m);
    p->images = n;
    p->x_image = static_cast<size_t>(ih * iw * c);
    p->y_image = static_cast<size_t>(oh * ow * m);
    partial.push_back(*full);  // last
    for (size_t i = 0; i < partial.size(); ++i) {
      const Tap& t = partial[i];
      const bool last = i + 1 == partial.size();
      const int64_t rows = t.rows.second - t.rows.first, cols = t.cols.second - t.cols.first;
      const int64_t iy = t.rows.first * g.strides[0] + t.ky * g.dilations[0] - g.pad_begin[0];
      const int64_t ix = t.cols.first * g.strides[1] + t.kx * g.dilations[1] - g.pad_begin[1];
      LiveTapProducts::Product pr;
      // One matrix of cols pixels x channels per image and output row (its rows sw pixels apart
      // in X), or of rows x cols pixels where the rows are whole and follow each other (stride 1,
      // every column): plain 2-D products, executed at each matrix's address. W's tap as [C, M]
      // (W is [M, C, kh, kw]).
      const bool one_matrix = cols == ow && cols == iw && g.strides[0] == 1 && g.strides[1] == 1;
      const int64_t pixels = one_matrix ? rows * cols : cols;
      pr.a = dnnl_adapter::strided_md({pixels, c}, {g.strides[1] * c, 1}, dt::f32);
      pr.y = dnnl_adapter::plain_md({pixels, m}, dt::f32);
      pr.matrices = one_matrix ? 1 : rows;
      pr.x_step = static_cast<size_t>(g.strides[0] * iw * c);
      pr.y_step = static_cast<size_t>(ow * m);
      const dnnl::memory::desc tap_weights =
          dnnl_adapter::strided_md({c, m}, {kh * kw, c * kh * kw}, dt::f32);
      const dnnl::memory::desc any_weights =
          packed_weights_md(dnnl_adapter::plain_md({c, m}, dt::f32), dt::f32, pixels);
      pr.x_at = static_cast<size_t>((iy * iw + ix) * c);
      pr.y_at = static_cast<size_t>((t.rows.first * ow + t.cols.first) * m);
      dnnl::primitive_attr attr = dnnl_adapter::scratch_attr();
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      if (last) act.append_to(ops);
      attr.set_post_ops(ops);
      if (last && has_bias) pr.bias = dnnl_adapter::plain_md({1, m}, dt::f32);
      const auto d = pr.bias.is_zero() ? dnnl::matmul::desc(pr.a, any_weights, pr.y)
                                       : dnnl::matmul::desc(pr.a, any_weights, pr.bias, pr.y);
      const dnnl::matmul::primitive_desc pd(d, attr, dnnl_adapter::engine());
      if (dnnl_adapter::is_reference(pd)) return nullptr;
      pr.prim = dnnl::matmul(pd);
      pr.b = pd.weights_desc();
      pr.scratch = pd.scratchpad_desc();
      scratch = std::max(scratch, pr.scratch.get_size());
      const size_t tap_offset = static_cast<size_t>(t.ky * kw + t.kx) * sizeof(float);
      pr.packed_b = dnnl_adapter::pack_constant(ctx, 1, w, tap_weights, pr.b, tap_offset);
      p->products.push_back(std::move(pr));
    }
    // Channels-last, in the logical dimensions the stored layouts' descriptors have.
    const auto x_last = activation_md({n, c, ih, iw}, dt::f32, StoredLayout::ChannelsLast);
    const auto y_last = activation_md({n, m, oh, ow}, dt::f32, StoredLayout::ChannelsLast);
    p->x = dnnl_adapter::Staged(stored_x, x_last, true, scratch);
    p->y = dnnl_adapter::Staged(stored_y, y_last, false, scratch);
    ctx.request_scratch(scratch);
    return p;
  });
}

void run_live_tap_products(const LiveTapProducts& p, const float* stored_x, const float* bias,
                           float* stored_y, void* scratch) {
  const float* x = static_cast<const float*>(p.x.in(stored_x, scratch));
  float* y = static_cast<float*>(p.y.out(stored_y, scratch));
  std::memset(y, 0, p.y_floats * sizeof(float));
  for (const LiveTapProducts::Product& pr : p.products)
    for (int64_t image = 0; image < p.images; ++image)
      for (int64_t r = 0; r < pr.matrices; ++r) {
        const size_t x_at = pr.x_at + image * p.x_image + r * pr.x_step;
        const size_t y_at = pr.y_at + image * p.y_image + r * pr.y_step;
        dnnl_adapter::Args args = {{DNNL_ARG_SRC, pr.a, x + x_at},
                                   {DNNL_ARG_WEIGHTS, pr.b, pr.packed_b.raw()},
                                   {DNNL_ARG_DST, pr.y, y + y_at}};
        if (!pr.bias.is_zero()) args.add(DNNL_ARG_BIAS, pr.bias, bias);
        dnnl_adapter::execute(pr.prim, args, pr.scratch, scratch);
      }
  p.y.finish(stored_y, scratch);
}

}  // namespace volt
