// Detection and sampling: RoiAlign, GridSample, MaxUnpool (NonMaxSuppression:
// non_max_suppression.cpp).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "operators/common/dispatch.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/common/tensor_values.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

// The four taps of a bilinear sample of an [H, W] plane at (y, x), zero outside (weights 0),
// as RoiAlign's reference computes them; the sample is the weighted sum in this order.
struct BilinearTaps {
  int64_t at[4] = {0, 0, 0, 0};
  double weight[4] = {0, 0, 0, 0};
  bool inside = false;  // (outside, the sample is 0 whatever X holds, infinities included)
};
BilinearTaps bilinear_taps(int64_t h, int64_t w, double y, double x) {
  BilinearTaps t;
  if (y < -1.0 || y > static_cast<double>(h) || x < -1.0 || x > static_cast<double>(w)) return t;
  y = std::max(y, 0.0);
  x = std::max(x, 0.0);
  int64_t y0 = static_cast<int64_t>(y), x0 = static_cast<int64_t>(x), y1, x1;
  if (y0 >= h - 1)
    y0 = y1 = h - 1, y = static_cast<double>(y0);
  else
    y1 = y0 + 1;
  if (x0 >= w - 1)
    x0 = x1 = w - 1, x = static_cast<double>(x0);
  else
    x1 = x0 + 1;
  const double ly = y - static_cast<double>(y0), lx = x - static_cast<double>(x0), hy = 1 - ly,
               hx = 1 - lx;
  t.at[0] = y0 * w + x0, t.at[1] = y0 * w + x1, t.at[2] = y1 * w + x0, t.at[3] = y1 * w + x1;
  t.weight[0] = hy * hx, t.weight[1] = hy * lx, t.weight[2] = ly * hx, t.weight[3] = ly * lx;
  t.inside = true;
  return t;
}

class RoiAlign final : public Kernel {
 public:
  explicit RoiAlign(const Node& n)
      : max_(n.attr_string("mode", "avg") == "max"),
        oh_(n.attr_int("output_height", 1)),
        ow_(n.attr_int("output_width", 1)),
        ratio_(n.attr_int("sampling_ratio", 0)),
        scale_(n.attr_float("spatial_scale", 1.0f)),
        half_pixel_(n.opset >= 16 &&
                    n.attr_string("coordinate_transformation_mode", "half_pixel") == "half_pixel") {
  }
  void infer(InferContext& ctx) const override {
    VOLT_CHECK(ctx.shape(0).size() == 4 && ctx.shape(1).size() == 2 && ctx.shape(1)[1] == 4,
               InvalidArgument,
               ctx.node().describe() + ": X must be 4-D and rois [num_rois, 4], got " +
                   shape_str(ctx.shape(0)) + " and " + shape_str(ctx.shape(1)));
    VOLT_CHECK(ctx.shape(2).size() == 1 && ctx.shape(2)[0] == ctx.shape(1)[0], InvalidArgument,
               ctx.node().describe() + ": batch_indices must be [num_rois], got " +
                   shape_str(ctx.shape(2)));
    VOLT_CHECK(oh_ > 0 && ow_ > 0, InvalidModel,
               ctx.node().describe() + ": output_height and output_width must be positive");
    ctx.set_output(0, ctx.dtype(0), {ctx.shape(1)[0], ctx.shape(0)[1], oh_, ow_});
  }
  // Each RoI's sample points (their bilinear taps) once, shared by its channels; the RoIs
  // across the threads, X read in its own type.
  void run(RunContext& ctx) const override {
    const Tensor& xt = ctx.input(0);
    const int64_t c = xt.dim(1), h = xt.dim(2), w = xt.dim(3), rois_n = ctx.input(1).dim(0);
    const auto rois = to_doubles(ctx.input(1));
    const auto idx = to_int64_vector(ctx.input(2), ctx.node(), "batch_indices");
    VOLT_CHECK(static_cast<int64_t>(idx.size()) == rois_n, InvalidArgument,
               ctx.node().describe() + ": batch_indices must have one entry per RoI (" +
                   std::to_string(rois_n) + "), got " + std::to_string(idx.size()));
    // Each RoI's sampling grid, checked here (not on the threads): finite corners, and a grid
    // of at most kMaxSamples taps (an RoI of 10^9 pixels with sampling_ratio 0 would ask for
    // billions; the table of taps would not fit).
    constexpr double kMaxSamples = double{1 << 24};
    const double offset = half_pixel_ ? 0.5 : 0.0;
    struct Grid {
      double x1, y1, bh, bw;
      int64_t gh, gw;
    };
    std::vector<Grid> grids(static_cast<size_t>(rois_n));
    for (int64_t r = 0; r < rois_n; ++r) {
      VOLT_CHECK(idx[r] >= 0 && idx[r] < xt.dim(0), InvalidArgument,
                 ctx.node().describe() + ": batch index out of range");
      const double x1 = rois[r * 4] * scale_ - offset, y1 = rois[r * 4 + 1] * scale_ - offset;
      const double x2 = rois[r * 4 + 2] * scale_ - offset, y2 = rois[r * 4 + 3] * scale_ - offset;
      VOLT_CHECK(std::isfinite(x1) && std::isfinite(y1) && std::isfinite(x2) && std::isfinite(y2),
                 InvalidArgument,
                 ctx.node().describe() + ": RoI " + std::to_string(r) +
                     " has a corner that is not a finite number");
      double rw = x2 - x1, rh = y2 - y1;
      if (!half_pixel_) rw = std::max(rw, 1.0), rh = std::max(rh, 1.0);
      const double gh = ratio_ > 0 ? static_cast<double>(ratio_)
                                   : std::max(0.0, std::ceil(rh / static_cast<double>(oh_)));
      const double gw = ratio_ > 0 ? static_cast<double>(ratio_)
                                   : std::max(0.0, std::ceil(rw / static_cast<double>(ow_)));
      VOLT_CHECK(gh * gw * static_cast<double>(oh_ * ow_) <= kMaxSamples, InvalidArgument,
                 ctx.node().describe() + ": RoI " + std::to_string(r) +
                     " needs more than 2^24 sample points");
      grids[static_cast<size_t>(r)] = {x1,
                                       y1,
                                       rh / static_cast<double>(oh_),
                                       rw / static_cast<double>(ow_),
                                       static_cast<int64_t>(gh),
                                       static_cast<int64_t>(gw)};
    }
    dispatch_floating(xt.dtype(), ctx, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = typename Compute<T>::type;
      const T* px = static_cast<const T*>(xt.raw());
      T* py = static_cast<T*>(ctx.output(0).raw());
      parallel_for(rois_n, rois_n > 1, [&](int64_t r) {
        const auto [x1, y1, bh, bw, gh, gw] = grids[static_cast<size_t>(r)];
        const int64_t samples = gh * gw;
        const double count = static_cast<double>(std::max<int64_t>(samples, 1));
        thread_local std::vector<BilinearTaps> taps;  // by bin, then sample
        taps.clear();
        for (int64_t by = 0; by < oh_; ++by)
          for (int64_t bx = 0; bx < ow_; ++bx)
            for (int64_t iy = 0; iy < gh; ++iy)
              for (int64_t ix = 0; ix < gw; ++ix) {
                const double yy = y1 + static_cast<double>(by) * bh +
                                  (static_cast<double>(iy) + 0.5) * bh / static_cast<double>(gh);
                const double xx = x1 + static_cast<double>(bx) * bw +
                                  (static_cast<double>(ix) + 0.5) * bw / static_cast<double>(gw);
                taps.push_back(bilinear_taps(h, w, yy, xx));
              }
        for (int64_t ch = 0; ch < c; ++ch) {
          const T* plane = px + (idx[r] * c + ch) * h * w;
          T* out = py + (r * c + ch) * oh_ * ow_;
          const BilinearTaps* t = taps.data();
          for (int64_t bin = 0; bin < oh_ * ow_; ++bin) {
            double acc = max_ ? -INFINITY : 0;
            for (int64_t s = 0; s < samples; ++s, ++t) {
              auto v = [&](int k) { return static_cast<double>(static_cast<C>(plane[t->at[k]])); };
              const double sample = t->inside ? t->weight[0] * v(0) + t->weight[1] * v(1) +
                                                    t->weight[2] * v(2) + t->weight[3] * v(3)
                                              : 0.0;
              acc = max_ ? std::max(acc, sample) : acc + sample;
            }
            out[bin] = static_cast<T>(static_cast<C>(max_ ? acc : acc / count));
          }
        }
      });
    });
  }

 private:
  bool max_;
  int64_t oh_, ow_, ratio_;
  float scale_;
  bool half_pixel_;
};

// GridSample's sampling, shared by the kernel and its gradient: the output is linear in X, a
// weighted sum of taps, so the gradient adds each tap's weight times dY back where it read.
class GridSampler {
 public:
  explicit GridSampler(const Node& n) : align_(n.attr_int("align_corners", 0) != 0) {
    const std::string mode = n.attr_string("mode", "bilinear"),
                      padding = n.attr_string("padding_mode", "zeros");
    VOLT_CHECK(mode == "bilinear" || mode == "nearest" || mode == "bicubic", InvalidModel,
               n.describe() + ": unknown mode '" + mode + "'");
    VOLT_CHECK(padding == "zeros" || padding == "border" || padding == "reflection", InvalidModel,
               n.describe() + ": unknown padding_mode '" + padding + "'");
    mode_ = mode == "bilinear" ? Mode::Bilinear : mode == "nearest" ? Mode::Nearest : Mode::Bicubic;
    padding_ = padding == "zeros"    ? Padding::Zeros
               : padding == "border" ? Padding::Border
                                     : Padding::Reflection;
  }

  // Checks X [N,C,H,W] and grid [N,H',W',2] (shapes known only at run time are checked again:
  // the grid's batch must be X's, and there must be something to sample from).
  static void check(const Tensor& xt, const Tensor& gridt, const Node& node) {
    VOLT_CHECK(
        xt.rank() == 4 && gridt.rank() == 4 && gridt.dim(0) == xt.dim(0) && gridt.dim(3) == 2,
        InvalidArgument, node.describe() + ": X must be [N,C,H,W] and grid [N,H',W',2]");
    VOLT_CHECK((xt.dim(2) > 0 && xt.dim(3) > 0) ||
                   xt.dim(0) * xt.dim(1) * gridt.dim(1) * gridt.dim(2) == 0,
               InvalidArgument,
               node.describe() + ": cannot sample an empty " + shape_str(xt.shape()));
  }

  // The taps of one image's output pixels: pixel p reads at[k] with weight[k] for k in
  // [first[p], first[p + 1]), indices into an H x W plane. The same for every channel, so a
  // kernel computes them once and then runs the channels' planes in parallel.
  struct Taps {
    std::vector<int64_t> first, at;
    std::vector<double> weight;
  };
  Taps taps_of_image(const double* grid, int64_t h, int64_t w, int64_t pixels) const {
    Taps t;
    t.first.reserve(static_cast<size_t>(pixels) + 1);
    t.first.push_back(0);
    for (int64_t p = 0; p < pixels; ++p) {
      taps(h, w, unnormalize(grid[p * 2 + 1], h), unnormalize(grid[p * 2], w),
           [&](int64_t at, double weight) {
             t.at.push_back(at);
             t.weight.push_back(weight);
           });
      t.first.push_back(static_cast<int64_t>(t.at.size()));
    }
    return t;
  }

  // Calls visit(plane offset of X, offset in that plane's output, index into the plane, weight)
  // for every tap of every output element.
  template <class Visit>
  void for_each_tap(const Tensor& xt, const Tensor& gridt, const Node& node, Visit&& visit) const {
    check(xt, gridt, node);
    const int64_t n = xt.dim(0), c = xt.dim(1), h = xt.dim(2), w = xt.dim(3);
    const int64_t pixels = gridt.dim(1) * gridt.dim(2);
    const auto grid = to_doubles(gridt);
    for (int64_t b = 0; b < n; ++b) {
      const Taps t = taps_of_image(grid.data() + b * pixels * 2, h, w, pixels);
      for (int64_t p = 0; p < pixels; ++p)
        for (int64_t k = t.first[p]; k < t.first[p + 1]; ++k)
          for (int64_t ch = 0; ch < c; ++ch)
            visit((b * c + ch) * h * w, (b * c + ch) * pixels + p, t.at[k], t.weight[k]);
    }
  }

 private:
  double unnormalize(double g, int64_t size) const {
    return align_ ? (g + 1) / 2 * static_cast<double>(size - 1)
                  : ((g + 1) * static_cast<double>(size) - 1) / 2;
  }
  // Reflects a coordinate into the valid range, as the spec's reference does.
  double reflect(double v, int64_t size) const {
    const double lo = align_ ? 0.0 : -0.5,
                 hi = align_ ? static_cast<double>(size - 1) : static_cast<double>(size) - 0.5;
    const double span = hi - lo;
    if (span <= 0) return 0;
    if (v < lo) {
      const double d = lo - v;
      const int64_t flips = static_cast<int64_t>(d / span);
      const double r = d - static_cast<double>(flips) * span;
      return flips % 2 == 0 ? lo + r : hi - r;
    }
    if (v > hi) {
      const double d = v - hi;
      const int64_t flips = static_cast<int64_t>(d / span);
      const double r = d - static_cast<double>(flips) * span;
      return flips % 2 == 0 ? hi - r : lo + r;
    }
    return v;
  }
  // The index in the plane pixel (y, x) reads, after padding; -1 for a zero pad.
  int64_t pixel(int64_t h, int64_t w, int64_t y, int64_t x) const {
    if (padding_ == Padding::Zeros) return (y >= 0 && y < h && x >= 0 && x < w) ? y * w + x : -1;
    if (padding_ == Padding::Border)
      return std::clamp<int64_t>(y, 0, h - 1) * w + std::clamp<int64_t>(x, 0, w - 1);
    const int64_t ry = static_cast<int64_t>(reflect(static_cast<double>(y), h)),
                  rx = static_cast<int64_t>(reflect(static_cast<double>(x), w));
    return std::clamp<int64_t>(ry, 0, h - 1) * w + std::clamp<int64_t>(rx, 0, w - 1);
  }
  // tap(index, weight) for each pixel sampling (y, x) reads.
  template <class Tap>
  void taps(int64_t h, int64_t w, double y, double x, Tap&& tap) const {
    auto read = [&](int64_t py, int64_t px, double weight) {
      const int64_t at = pixel(h, w, py, px);
      if (at >= 0) tap(at, weight);
    };
    // A grid value that is not a number, or so far outside that its pixel index would not fit
    // an integer, reads nothing (its output is 0 whatever the padding mode): converting it to
    // an index is undefined.
    if (!(std::abs(x) < 1e9) || !(std::abs(y) < 1e9)) return;
    if (padding_ == Padding::Border) {
      x = std::clamp(x, 0.0, static_cast<double>(w - 1));
      y = std::clamp(y, 0.0, static_cast<double>(h - 1));
    } else if (padding_ == Padding::Reflection) {
      x = reflect(x, w);
      y = reflect(y, h);
    }
    if (mode_ == Mode::Nearest)
      return read(static_cast<int64_t>(std::nearbyint(y)), static_cast<int64_t>(std::nearbyint(x)),
                  1.0);
    const int64_t x0 = static_cast<int64_t>(std::floor(x)),
                  y0 = static_cast<int64_t>(std::floor(y));
    const double tx = x - static_cast<double>(x0), ty = y - static_cast<double>(y0);
    if (mode_ == Mode::Bilinear) {
      read(y0, x0, (1 - ty) * (1 - tx));
      read(y0, x0 + 1, (1 - ty) * tx);
      read(y0 + 1, x0, ty * (1 - tx));
      read(y0 + 1, x0 + 1, ty * tx);
      return;
    }
    auto coeffs = [](double t, double c[4]) {
      const double A = -0.75;
      c[0] = ((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A;
      c[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
      c[2] = ((A + 2) * (1 - t) - (A + 3)) * (1 - t) * (1 - t) + 1;
      c[3] = ((A * (2 - t) - 5 * A) * (2 - t) + 8 * A) * (2 - t) - 4 * A;
    };
    double cx[4], cy[4];
    coeffs(tx, cx);
    coeffs(ty, cy);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) read(y0 - 1 + i, x0 - 1 + j, cy[i] * cx[j]);
  }

  enum class Mode { Bilinear, Nearest, Bicubic } mode_;
  enum class Padding { Zeros, Border, Reflection } padding_;
  bool align_;
};

class GridSample final : public Kernel {
 public:
  explicit GridSample(const Node& n) : sampler_(n) {}
  void infer(InferContext& ctx) const override {
    const Shape &x = ctx.shape(0), &g = ctx.shape(1);
    VOLT_CHECK(x.size() == 4 && g.size() == 4 && g[3] == 2 && g[0] == x[0], InvalidArgument,
               ctx.node().describe() + ": X must be [N,C,H,W] and grid [N,H',W',2]");
    ctx.set_output(0, ctx.dtype(0), {x[0], x[1], g[1], g[2]});
  }
  // Each image's taps once, then the (image, channel) planes across the threads, each output
  // summed in double from its taps.
  void run(RunContext& ctx) const override {
    const Tensor &x = ctx.input(0), &gridt = ctx.input(1);
    GridSampler::check(x, gridt, ctx.node());
    const int64_t n = x.dim(0), c = x.dim(1), plane = x.dim(2) * x.dim(3);
    const int64_t pixels = gridt.dim(1) * gridt.dim(2);
    const auto grid = to_doubles(gridt);
    std::vector<GridSampler::Taps> taps;
    for (int64_t b = 0; b < n; ++b)
      taps.push_back(
          sampler_.taps_of_image(grid.data() + b * pixels * 2, x.dim(2), x.dim(3), pixels));
    dispatch_floating(x.dtype(), ctx, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = typename Compute<T>::type;
      const T* px = static_cast<const T*>(x.raw());
      T* py = static_cast<T*>(ctx.output(0).raw());
      parallel_for(n * c, n * c > 1 && n * c * pixels > 16384, [&](int64_t bc) {
        const GridSampler::Taps& t = taps[static_cast<size_t>(bc / c)];
        const T* in = px + bc * plane;
        T* out = py + bc * pixels;
        for (int64_t p = 0; p < pixels; ++p) {
          double sum = 0;
          for (int64_t k = t.first[p]; k < t.first[p + 1]; ++k)
            sum += t.weight[k] * static_cast<double>(static_cast<C>(in[t.at[k]]));
          out[p] = static_cast<T>(static_cast<C>(sum));
        }
      });
    });
  }

 private:
  GridSampler sampler_;
};

// GridSample's gradient with respect to X: inputs dY, X, grid.
class GridSampleGrad final : public Kernel {
 public:
  explicit GridSampleGrad(const Node& n) : sampler_(n) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.dtype(1), ctx.shape(1)); }
  void run(RunContext& ctx) const override {
    const auto dy = to_doubles(ctx.input(0));
    std::vector<double> dx(static_cast<size_t>(ctx.input(1).numel()), 0.0);
    VOLT_CHECK(static_cast<int64_t>(dy.size()) == ctx.input(1).dim(0) * ctx.input(1).dim(1) *
                                                      ctx.input(2).dim(1) * ctx.input(2).dim(2),
               InvalidArgument, ctx.node().describe() + ": dY does not match X and the grid");
    sampler_.for_each_tap(ctx.input(1), ctx.input(2), ctx.node(),
                          [&](int64_t plane, int64_t o, int64_t at, double weight) {
                            dx[static_cast<size_t>(plane + at)] += weight * dy[o];
                          });
    from_doubles(ctx.output(0), dx);
  }

 private:
  GridSampler sampler_;
};

class MaxUnpool final : public Kernel {
 public:
  explicit MaxUnpool(const Node& n)
      : kernel_(n.attr_ints("kernel_shape")),
        strides_(n.attr_ints("strides")),
        pads_(n.attr_ints("pads")) {}
  void infer(InferContext& ctx) const override {
    const Shape& x = ctx.shape(0);
    VOLT_CHECK(x.size() >= 3, InvalidArgument,
               ctx.node().describe() + ": X must be N x C x spatial..., got " + shape_str(x));
    VOLT_CHECK(ctx.shape(1) == x, InvalidArgument,
               ctx.node().describe() + ": I must have X's shape " + shape_str(x) + ", got " +
                   shape_str(ctx.shape(1)));
    const Shape pooled = unpooled_spatial(x, ctx.node());
    if (ctx.has_input(2)) {
      const Tensor* s = ctx.input_tensor(2);
      if (!s) return ctx.set_output_unknown(0, ctx.dtype(0));
      const auto out = to_int64_vector(*s, ctx.node(), "output_shape");
      VOLT_CHECK(out.size() == x.size(), InvalidArgument,
                 ctx.node().describe() + ": output_shape must have X's rank");
      return ctx.set_output(0, ctx.dtype(0), out);
    }
    Shape out{x[0], x[1]};
    out.insert(out.end(), pooled.begin(), pooled.end());
    ctx.set_output(0, ctx.dtype(0), out);
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const auto idx = to_int64_vector(ctx.input(1), ctx.node(), "indices");
    Tensor& y = ctx.output(0);
    dispatch_numeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* py = static_cast<T*>(y.raw());
      std::fill(py, py + y.numel(), T{});
      // Indices are flat over the default unpooled shape (MaxPool's Indices); with an explicit
      // output_shape they keep their spatial coordinates in the larger tensor.
      const size_t r = x.rank() - 2;
      const Shape pooled = unpooled_spatial(x.shape(), ctx.node());
      const int64_t pooled_plane = std::max<int64_t>(numel_of(pooled), 1);
      const Shape out_sp(y.shape().begin() + 2, y.shape().end());
      const int64_t out_plane = numel_of(out_sp);
      VOLT_CHECK(static_cast<int64_t>(idx.size()) == x.numel(), InvalidArgument,
                 ctx.node().describe() + ": I must have one index per element of X");
      for (int64_t e = 0; e < x.numel(); ++e) {
        VOLT_CHECK(idx[e] >= 0, InvalidArgument,
                   ctx.node().describe() + ": index " + std::to_string(idx[e]) + " is negative");
        int64_t within = idx[e] % pooled_plane, flat = 0, scale = 1;
        bool fits = true;
        for (size_t d = r; d-- > 0;) {
          const int64_t coord = within % pooled[d];
          within /= pooled[d];
          fits = fits && coord < out_sp[d];
          flat += coord * scale;
          scale *= out_sp[d];
        }
        const int64_t dst = fits ? idx[e] / pooled_plane * out_plane + flat : -1;
        VOLT_CHECK(
            dst >= 0 && dst < y.numel(), InvalidArgument,
            ctx.node().describe() + ": index " + std::to_string(idx[e]) + " is out of range");
        py[dst] = static_cast<const T*>(x.raw())[e];
      }
    });
  }

 private:
  // The spatial size MaxPool's inverse gives X: (in - 1) · stride + kernel - pads, each > 0.
  Shape unpooled_spatial(const Shape& x, const Node& node) const {
    const size_t r = x.size() - 2;
    VOLT_CHECK(kernel_.size() == r && (strides_.empty() || strides_.size() == r) &&
                   (pads_.empty() || pads_.size() == 2 * r),
               InvalidModel,
               node.describe() + ": kernel_shape, strides and pads must match X's " +
                   std::to_string(r) + " spatial dimensions");
    Shape pooled;
    for (size_t i = 0; i < r; ++i) {
      const int64_t stride = strides_.empty() ? 1 : strides_[i];
      const int64_t pad = pads_.empty() ? 0 : pads_[i] + pads_[i + r];
      int64_t d = 0;
      const bool overflow = __builtin_mul_overflow(x[2 + i] - 1, stride, &d) ||
                            __builtin_add_overflow(d, kernel_[i], &d) ||
                            __builtin_sub_overflow(d, pad, &d);
      VOLT_CHECK(!overflow && stride > 0 && kernel_[i] > 0 && d > 0, InvalidArgument,
                 node.describe() + ": the unpooled size of spatial axis " + std::to_string(i) +
                     " is not positive");
      pooled.push_back(d);
    }
    return pooled;
  }

  std::vector<int64_t> kernel_, strides_, pads_;
};

}  // namespace

VOLT_REGISTER_KERNEL(roi_align, {.op = "RoiAlign",
                                 .since = 10,
                                 .types = kFloatTypes,
                                 .create = make_kernel<RoiAlign>});
VOLT_REGISTER_KERNEL(grid_sample, {.op = "GridSample",
                                   .since = 16,
                                   .types = kFloatTypes,
                                   .create = make_kernel<GridSample>});
VOLT_REGISTER_KERNEL(grid_sample_grad, volt_kernel("GridSampleGrad", make_kernel<GridSampleGrad>));
VOLT_REGISTER_KERNEL(max_unpool, {.op = "MaxUnpool",
                                  .since = 9,
                                  .types = kNumericTypes,
                                  .create = make_kernel<MaxUnpool>});

}  // namespace volt
