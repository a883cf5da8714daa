// Resize (opsets 10 to 18: nearest, linear and cubic, every coordinate transformation mode,
// every nearest rounding mode, exclude_outside, tf_crop_and_resize extrapolation, axes and
// keep_aspect_ratio_policy) and Upsample. Separable: each axis maps an output coordinate to a
// few (input index, weight) taps, and an output element sums the products over the axes. fp32
// resizes of the last two axes (images) run on a plane kernel over the same taps; the general
// loop (double accumulation) serves the rest and is the reference.
#include <algorithm>
#include <cmath>
#include <functional>

#include "operators/common/dispatch.hpp"
#include "operators/common/layout.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/common/tensor_values.hpp"
#include "operators/cpu/resize_stored_channels.hpp"
#include "operators/registry.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

struct Tap {
  int64_t index;
  double weight;
};

struct ResizeAttrs {
  std::string mode = "nearest", transform = "half_pixel", nearest = "round_prefer_floor",
              aspect = "stretch";
  double cubic_a = -0.75, extrapolation = 0;
  bool exclude_outside = false;
  std::vector<int64_t> axes;
};

class Resize final : public Kernel {
 public:
  Resize(const Node& n, bool upsample, bool backward = false)
      : upsample_(upsample),
        backward_(backward),
        layout_(stored_layout(n)),
        last_(layout_ != StoredLayout::ChannelsFirst),
        offset_(backward ? 1 : 0),
        opset_(backward ? static_cast<int>(n.attr_int("forward_opset", 13)) : n.opset) {
    a_.mode = n.attr_string("mode", "nearest");
    if (upsample || opset_ < 11) {
      // Upsample and Resize-10 map coordinates asymmetrically and take the floor for nearest.
      a_.transform = "asymmetric";
      a_.nearest = "floor";
      if (a_.mode == "bilinear") a_.mode = "linear";
    } else {
      a_.transform = n.attr_string("coordinate_transformation_mode", "half_pixel");
      a_.nearest = n.attr_string("nearest_mode", "round_prefer_floor");
      a_.cubic_a = n.attr_float("cubic_coeff_a", -0.75f);
      a_.exclude_outside = n.attr_int("exclude_outside", 0) != 0;
      a_.extrapolation = n.attr_float("extrapolation_value", 0);
      a_.axes = n.attr_ints("axes");
      a_.aspect = n.attr_string("keep_aspect_ratio_policy", "stretch");
    }
    VOLT_CHECK(a_.mode == "nearest" || a_.mode == "linear" || a_.mode == "cubic", InvalidModel,
               n.describe() + ": unknown mode '" + a_.mode + "'");
    VOLT_CHECK(n.attr_int("antialias", 0) == 0, NotImplemented,
               n.describe() + ": antialias=1 is not supported");
    if (upsample && opset_ < 9) attr_scales_ = n.attr_floats("scales");
  }

  void infer(InferContext& ctx) const override {
    if (backward_) return ctx.set_output(0, ctx.dtype(0), ctx.shape(1));  // dx is shaped like x
    std::vector<double> scales;
    Shape out;
    const Shape x = last_ ? logical_shape(ctx.shape(0), true, ctx.node()) : ctx.shape(0);
    if (!resolve(
            x, [&](size_t i) { return ctx.has_input(i) ? ctx.input_tensor(i) : nullptr; },
            [&](size_t i) { return ctx.has_input(i); }, ctx.node(), scales, out))
      return ctx.set_output_unknown(0, ctx.dtype(0));
    ctx.set_output(0, ctx.dtype(0), last_ ? to_channels_last(out) : out);
    // The fp32 plane kernel takes what resizes only the last two axes (checked again at run
    // time on the taps, with tf_crop_and_resize's outside points declined there).
    if (ctx.dtype(0) != DType::Float)
      return ctx.runs_reference_loop(std::string("dtype ") + dtype_name(ctx.dtype(0)));
    for (size_t d = 0; d + 2 < out.size(); ++d)
      if (out[d] != x[d] || scales[d] != 1.0)
        return ctx.runs_reference_loop("resizes an axis other than the last two");
    if (a_.transform == "tf_crop_and_resize") ctx.runs_reference_loop("tf_crop_and_resize");
  }

  void run(RunContext& ctx) const override {
    const Tensor& stored = ctx.input(offset_);
    const Shape xs = last_ ? logical_shape(stored.shape(), true, ctx.node()) : stored.shape();
    std::vector<double> scales;
    Shape out;
    resolve(
        xs,
        [&](size_t i) { return ctx.has_input(i + offset_) ? &ctx.input(i + offset_) : nullptr; },
        [&](size_t i) { return ctx.has_input(i + offset_); }, ctx.node(), scales, out);
    std::vector<double> roi;
    const size_t roi_input = 1 + offset_;
    if (!upsample_ && opset_ >= 11 && ctx.has_input(roi_input) && ctx.input(roi_input).numel() > 0)
      roi = to_doubles(ctx.input(roi_input));
    const size_t r = xs.size();
    // Per axis and output coordinate: the taps, or "outside" for tf_crop_and_resize.
    std::vector<std::vector<std::vector<Tap>>> taps(r);
    std::vector<std::vector<char>> outside(r);
    for (size_t d = 0; d < r; ++d)
      axis_taps(d, xs[d], out[d], scales[d], roi, r, taps[d], outside[d]);
    Tensor& y = ctx.output(0);
    if (backward_) return scatter(ctx.input(0), y, out, taps, outside, strides_of(xs), ctx);
    if (stored.dtype() == DType::Float && planar(xs, out, taps, outside))
      return last_ ? resize_stored(stored, y, xs, taps) : resize_planes(stored, y, taps);
    if (!last_) return general(stored, y, out, taps, outside);
    // Channels-last outside the plane kernels: the general loop on channels-first copies.
    const Tensor x = channels_first_copy(stored, layout_);
    Tensor y_first = allocate_tensor(y.dtype(), out);
    general(x, y_first, out, taps, outside);
    write_stored(y_first, layout_, y);
  }

 private:
  void general(const Tensor& x, Tensor& y, const Shape& out,
               const std::vector<std::vector<std::vector<Tap>>>& taps,
               const std::vector<std::vector<char>>& outside) const {
    const size_t r = x.rank();
    const auto st = strides_of(x.shape());
    dispatch_numeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = typename Compute<T>::type;
      const T* px = static_cast<const T*>(x.raw());
      T* py = static_cast<T*>(y.raw());
      std::vector<int64_t> idx(r, 0);
#pragma omp parallel for firstprivate(idx) if (y.numel() > 65536)
      for (int64_t e = 0; e < y.numel(); ++e) {
        int64_t rem = e;
        bool out_of_range = false;
        for (size_t d = r; d-- > 0;) {
          idx[d] = rem % out[d];
          rem /= out[d];
          out_of_range |= outside[d][idx[d]] != 0;
        }
        if (out_of_range) {
          py[e] = static_cast<T>(static_cast<C>(a_.extrapolation));
          continue;
        }
        py[e] = static_cast<T>(static_cast<C>(accumulate(px, st, taps, idx, 0, 0)));
      }
    });
  }

  // Whether only the last two axes (or the last) are resized and no output falls outside the
  // input (tf_crop_and_resize): then the fp32 planes run on resize_planes (or, stored
  // channels-last, on resize_channels_last). `x` is the logical (channels-first) shape.
  static bool planar(const Shape& x, const Shape& out,
                     const std::vector<std::vector<std::vector<Tap>>>& taps,
                     const std::vector<std::vector<char>>& outside) {
    const size_t r = x.size();
    if (r < 2 || numel_of(x) == 0) return false;
    for (size_t d = 0; d < r; ++d) {
      for (char o : outside[d])
        if (o) return false;
      if (d + 2 < r && (out[d] != x[d] || !identity(taps[d]))) return false;
    }
    return true;
  }

  // Stored channels-last (N x H x W x C; `x` the logical N x C x H x W) or in blocks of b
  // channels (the same loop on N x C/b images of b channels): resize_stored_channels.
  void resize_stored(const Tensor& stored, Tensor& y, const Shape& x,
                     const std::vector<std::vector<std::vector<Tap>>>& taps) const {
    const int64_t block = block_channels(layout_);
    const int64_t images = block ? x[0] * (x[1] / block) : x[0];
    resize_stored_channels(stored.data<float>(), y.data<float>(), images, x[2], x[3],
                           block ? block : x[1], flat_taps(taps[2]), flat_taps(taps[3]));
  }

  // An axis's taps as AxisTaps: the same count for every output coordinate, the shorter lists
  // padded with zero weights on their last index (so that every index is one the output reads).
  static AxisTaps flat_taps(const std::vector<std::vector<Tap>>& taps) {
    AxisTaps flat;
    for (const auto& t : taps) flat.k = std::max<int64_t>(flat.k, static_cast<int64_t>(t.size()));
    flat.index.assign(taps.size() * static_cast<size_t>(flat.k), 0);
    flat.weight.assign(flat.index.size(), 0.0f);
    for (size_t o = 0; o < taps.size(); ++o)
      for (size_t t = 0; t < static_cast<size_t>(flat.k) && !taps[o].empty(); ++t) {
        const Tap& tap = taps[o][std::min(t, taps[o].size() - 1)];
        flat.index[o * flat.k + t] = tap.index;
        if (t >= taps[o].size()) continue;
        flat.weight[o * flat.k + t] = static_cast<float>(tap.weight);
        flat.copy = flat.copy && tap.weight == 1.0;
      }
    flat.copy = flat.copy && flat.k == 1;
    return flat;
  }

  static bool identity(const std::vector<std::vector<Tap>>& taps) {
    for (size_t o = 0; o < taps.size(); ++o)
      if (taps[o].size() != 1 || taps[o][0].index != static_cast<int64_t>(o) ||
          taps[o][0].weight != 1.0)
        return false;
    return true;
  }

  // fp32 planes (every coordinate mode and interpolation: the taps carry them), parallel over
  // planes, in two passes: each input row that an output row reads is first resized along the
  // width into a buffer (K column taps per output column, zero weights padding the shorter
  // ones, so the inner loop has a fixed trip count; a gather for nearest), then each output row
  // is the weighted sum of its buffered rows (contiguous, vectorized), or a copy of one.
  static void resize_planes(const Tensor& x, Tensor& y,
                            const std::vector<std::vector<std::vector<Tap>>>& taps) {
    const size_t r = x.rank();
    const auto& rows = taps[r - 2];
    const auto& cols = taps[r - 1];
    const int64_t ih = x.dim(r - 2), iw = x.dim(r - 1);
    const int64_t oh = static_cast<int64_t>(rows.size()), ow = static_cast<int64_t>(cols.size());
    const int64_t planes = x.numel() / (ih * iw);  // planar() declined empty inputs
    const AxisTaps flat = flat_taps(cols);
    const int64_t k = flat.k;
    const bool gather = flat.copy;
    std::vector<char> read(static_cast<size_t>(ih), 0);  // input rows some output row reads
    for (const auto& row : rows)
      for (const Tap& t : row) read[t.index] = 1;
    const float* px = x.data<float>();
    float* py = y.data<float>();
    const int64_t* ci = flat.index.data();
    const float* cw = flat.weight.data();
#pragma omp parallel if (planes * oh * ow > 16384)
    {
      std::vector<float> buffer(static_cast<size_t>(ih * ow));
#pragma omp for
      for (int64_t p = 0; p < planes; ++p) {
        const float* plane = px + p * ih * iw;
        for (int64_t iy = 0; iy < ih; ++iy) {
          if (!read[iy]) continue;
          const float* src = plane + iy * iw;
          float* dst = buffer.data() + iy * ow;
          if (gather) {
            for (int64_t o = 0; o < ow; ++o) dst[o] = src[ci[o]];
            continue;
          }
          for (int64_t o = 0; o < ow; ++o) {
            float v = 0.0f;
            for (int64_t t = 0; t < k; ++t) v += cw[o * k + t] * src[ci[o * k + t]];
            dst[o] = v;
          }
        }
        for (int64_t oy = 0; oy < oh; ++oy) {
          float* dst = py + (p * oh + oy) * ow;
          const auto& row = rows[oy];
          if (row.size() == 1 && row[0].weight == 1.0) {
            std::copy_n(buffer.data() + row[0].index * ow, ow, dst);
            continue;
          }
          std::fill_n(dst, ow, 0.0f);
          for (const Tap& t : row) {
            const float* src = buffer.data() + t.index * ow;
            const float w = static_cast<float>(t.weight);
#pragma omp simd
            for (int64_t o = 0; o < ow; ++o) dst[o] += w * src[o];
          }
        }
      }
    }
  }

  // dx[tap] += weight * dy over every output element and tap product.
  static void scatter(const Tensor& dyt, Tensor& dxt, const Shape& out,
                      const std::vector<std::vector<std::vector<Tap>>>& taps,
                      const std::vector<std::vector<char>>& outside, const std::vector<int64_t>& st,
                      const RunContext& ctx) {
    VOLT_CHECK(dyt.shape() == out, InvalidArgument,
               ctx.node().describe() + ": the gradient has shape " + shape_str(dyt.shape()) +
                   ", expected " + shape_str(out));
    const auto dy = to_doubles(dyt);
    std::vector<double> dx(static_cast<size_t>(dxt.numel()), 0.0);
    const size_t r = out.size();
    std::vector<int64_t> idx(r);
    std::function<void(size_t, int64_t, double, double)> spread = [&](size_t d, int64_t off,
                                                                      double w, double g) {
      if (d == r) {
        dx[off] += w * g;
        return;
      }
      for (const Tap& t : taps[d][idx[d]]) spread(d + 1, off + t.index * st[d], w * t.weight, g);
    };
    for (int64_t e = 0; e < dyt.numel(); ++e) {
      int64_t rem = e;
      bool skip = false;
      for (size_t d = r; d-- > 0;) {
        idx[d] = rem % out[d];
        rem /= out[d];
        skip = skip || outside[d][idx[d]] != 0;
      }
      if (!skip) spread(0, 0, 1.0, dy[e]);
    }
    dispatch_numeric(dxt.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* p = static_cast<T*>(dxt.raw());
      for (size_t i = 0; i < dx.size(); ++i)
        p[i] = static_cast<T>(static_cast<typename Compute<T>::type>(dx[i]));
    });
  }

  template <class T>
  static double accumulate(const T* px, const std::vector<int64_t>& st,
                           const std::vector<std::vector<std::vector<Tap>>>& taps,
                           const std::vector<int64_t>& idx, size_t d, int64_t off) {
    if (d == taps.size())
      return static_cast<double>(static_cast<typename Compute<T>::type>(px[off]));
    double s = 0;
    for (const Tap& t : taps[d][idx[d]])
      s += t.weight * accumulate(px, st, taps, idx, d + 1, off + t.index * st[d]);
    return s;
  }

  // Scales and output shape; false when an input they depend on is not known yet.
  template <class Get, class Has>
  bool resolve(const Shape& in, Get get, Has has, const Node& node, std::vector<double>& scales,
               Shape& out) const {
    const size_t r = in.size();
    std::vector<int64_t> axes;
    for (int64_t a : a_.axes) axes.push_back(normalize_axis(a, static_cast<int64_t>(r), node));
    if (axes.empty())
      for (size_t i = 0; i < r; ++i) axes.push_back(static_cast<int64_t>(i));
    scales.assign(r, 1.0);
    out = in;
    std::vector<double> given_scales;
    std::vector<int64_t> sizes;
    if (upsample_ && opset_ < 9) {
      given_scales.assign(attr_scales_.begin(), attr_scales_.end());
    } else {
      const size_t scales_input = upsample_ || opset_ < 11 ? 1 : 2, sizes_input = 3;
      if (has(scales_input)) {
        const Tensor* t = get(scales_input);
        if (!t) return false;
        if (t->numel() > 0) given_scales = to_doubles(*t);
      }
      if (given_scales.empty() && has(sizes_input)) {
        const Tensor* t = get(sizes_input);
        if (!t) return false;
        sizes = to_int64_vector(*t, node, "sizes");
      }
    }
    if (!given_scales.empty()) {
      VOLT_CHECK(given_scales.size() == axes.size(), InvalidArgument,
                 node.describe() + ": scales needs one value per resized axis");
      for (size_t i = 0; i < axes.size(); ++i) {
        VOLT_CHECK(given_scales[i] > 0, InvalidArgument,
                   node.describe() + ": scales must be positive");
        scales[axes[i]] = given_scales[i];
        out[axes[i]] =
            static_cast<int64_t>(std::floor(static_cast<double>(in[axes[i]]) * given_scales[i]));
      }
      return true;
    }
    VOLT_CHECK(sizes.size() == axes.size(), InvalidArgument,
               node.describe() + ": give scales or sizes, one value per resized axis");
    if (a_.aspect != "stretch") {
      double s = a_.aspect == "not_larger" ? INFINITY : 0;
      for (size_t i = 0; i < axes.size(); ++i) {
        const double v = static_cast<double>(sizes[i]) / static_cast<double>(in[axes[i]]);
        s = a_.aspect == "not_larger" ? std::min(s, v) : std::max(s, v);
      }
      for (size_t i = 0; i < axes.size(); ++i) {
        scales[axes[i]] = s;
        out[axes[i]] = static_cast<int64_t>(std::round(s * static_cast<double>(in[axes[i]])));
      }
      return true;
    }
    for (size_t i = 0; i < axes.size(); ++i) {
      VOLT_CHECK(sizes[i] >= 0, InvalidArgument, node.describe() + ": sizes must be >= 0");
      out[axes[i]] = sizes[i];
      scales[axes[i]] =
          in[axes[i]] ? static_cast<double>(sizes[i]) / static_cast<double>(in[axes[i]]) : 1.0;
    }
    return true;
  }

  void axis_taps(size_t d, int64_t in, int64_t out, double scale, const std::vector<double>& roi,
                 size_t rank, std::vector<std::vector<Tap>>& taps,
                 std::vector<char>& outside) const {
    taps.assign(static_cast<size_t>(out), {});
    outside.assign(static_cast<size_t>(out), 0);
    for (int64_t o = 0; o < out; ++o) {
      if (in == out && scale == 1.0 && a_.transform != "tf_crop_and_resize") {
        taps[o] = {{o, 1.0}};
        continue;
      }
      const double xr = static_cast<double>(o);
      // The spec's resized length is in * scale before rounding (it differs from `out` when
      // scales are given and do not divide evenly).
      const double len = static_cast<double>(in) * scale;
      double x = 0;
      const std::string& m = a_.transform;
      if (m == "half_pixel")
        x = (xr + 0.5) / scale - 0.5;
      else if (m == "pytorch_half_pixel")
        x = len > 1 ? (xr + 0.5) / scale - 0.5 : 0;
      else if (m == "align_corners")
        x = len == 1 ? 0 : xr * static_cast<double>(in - 1) / (len - 1);
      else if (m == "tf_half_pixel_for_nn")
        x = (xr + 0.5) / scale;
      else if (m == "asymmetric")
        x = xr / scale;
      else if (m == "half_pixel_symmetric") {
        const double adj = static_cast<double>(out) / (scale * static_cast<double>(in));
        const double center = static_cast<double>(in) / 2.0;
        x = center * (1 - adj) + (xr + 0.5) / scale - 0.5;
      } else if (m == "tf_crop_and_resize") {
        const double start = roi.size() == 2 * rank ? roi[d] : 0,
                     end = roi.size() == 2 * rank ? roi[d + rank] : 1;
        x = len > 1 ? start * static_cast<double>(in - 1) +
                          xr * (end - start) * static_cast<double>(in - 1) / (len - 1)
                    : 0.5 * (start + end) * static_cast<double>(in - 1);
        if (x < 0 || x > static_cast<double>(in - 1)) {
          outside[o] = 1;
          continue;
        }
      } else {
        fail(ErrorCode::InvalidModel, "Resize: unknown coordinate_transformation_mode '" + m + "'");
      }
      auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
      if (a_.mode == "nearest") {
        int64_t i;
        const double fl = std::floor(x), frac = x - fl;
        if (a_.nearest == "floor")
          i = static_cast<int64_t>(fl);
        else if (a_.nearest == "ceil")
          i = static_cast<int64_t>(std::ceil(x));
        else if (a_.nearest == "round_prefer_ceil")
          i = static_cast<int64_t>(frac == 0.5 ? fl + 1 : std::round(x));
        else
          i = static_cast<int64_t>(frac == 0.5 ? fl : std::round(x));
        taps[o] = {{clamp(i), 1.0}};
      } else if (a_.mode == "linear") {
        const double xc = std::clamp(x, 0.0, static_cast<double>(in - 1));
        const int64_t i0 = static_cast<int64_t>(std::floor(xc));
        const double t = xc - static_cast<double>(i0);
        taps[o] = {{clamp(i0), 1 - t}, {clamp(i0 + 1), t}};
      } else {  // cubic, with edge padding or (exclude_outside) renormalized in-range taps
        const int64_t i0 = static_cast<int64_t>(std::floor(x));
        const double t = x - static_cast<double>(i0), A = a_.cubic_a;
        const double c[4] = {((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A,
                             ((A + 2) * t - (A + 3)) * t * t + 1,
                             ((A + 2) * (1 - t) - (A + 3)) * (1 - t) * (1 - t) + 1,
                             ((A * (2 - t) - 5 * A) * (2 - t) + 8 * A) * (2 - t) - 4 * A};
        double total = 0;
        for (int k = 0; k < 4; ++k) {
          const int64_t i = i0 - 1 + k;
          const bool in_range = i >= 0 && i < in;
          if (a_.exclude_outside && !in_range) continue;
          taps[o].push_back({clamp(i), c[k]});
          total += c[k];
        }
        if (a_.exclude_outside && total != 0)
          for (Tap& tp : taps[o]) tp.weight /= total;
      }
    }
  }

  bool upsample_, backward_;
  StoredLayout layout_;  // volt.layout: NHWC inside the channels_last region
  bool last_;            // stored channels-last
  size_t offset_;        // 1 in backward mode, where input 0 is the gradient
  int opset_;
  ResizeAttrs a_;
  std::vector<float> attr_scales_;
};

}  // namespace

VOLT_REGISTER_KERNEL(
    resize, {.op = "Resize", .since = 10, .types = kNumericTypes, .create = [](const Node& n) {
               return std::make_unique<Resize>(n, false);
             }});
VOLT_REGISTER_KERNEL(resize_grad, volt_kernel("ResizeGrad", [](const Node& n) {
                       return std::make_unique<Resize>(n, n.attr_int("upsample", 0) != 0, true);
                     }));
VOLT_REGISTER_KERNEL(upsample,
                     {.op = "Upsample", .types = kNumericTypes, .create = [](const Node& n) {
                        return std::make_unique<Resize>(n, true);
                      }});

}  // namespace volt
