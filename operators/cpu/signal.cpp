// Signal processing (opset 17): HannWindow, HammingWindow, BlackmanWindow, DFT, STFT and
// MelWeightMatrix. Transforms are direct O(n^2) sums in double precision.
#include <algorithm>
#include <cmath>
#include <complex>

#include "operators/common/dispatch.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/common/tensor_values.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

// Lengths and counts taken from inputs are refused past this (2^31 samples).
constexpr int64_t kMaxLength = int64_t{1} << 31;

constexpr double kPi = 3.14159265358979323846;

class Window final : public Kernel {
 public:
  Window(const Node& n, std::vector<double> coeffs)
      : coeffs_(std::move(coeffs)),
        periodic_(n.attr_int("periodic", 1) != 0),
        dtype_(static_cast<DType>(n.attr_int("output_datatype", 1))) {}
  void infer(InferContext& ctx) const override {
    const Tensor* s = ctx.input_tensor(0);
    if (!s) return ctx.set_output_unknown(0, dtype_);
    ctx.set_output(0, dtype_, {scalar_int(*s, ctx.node(), "size", 0, kMaxLength)});
  }
  void run(RunContext& ctx) const override {
    Tensor& y = ctx.output(0);
    const double n = static_cast<double>(y.numel()), denom = periodic_ ? n : n - 1;
    fill_from(y, [&](int64_t i) {
      double v = 0;
      for (size_t k = 0; k < coeffs_.size(); ++k)
        v += (k % 2 ? -1 : 1) * coeffs_[k] *
             std::cos(2 * kPi * static_cast<double>(k) * static_cast<double>(i) / denom);
      return v;
    });
  }

 private:
  std::vector<double> coeffs_;
  bool periodic_;
  DType dtype_;
};

// Reads [..., n, 1 or 2] as complex values along `axis`.
class Dft final : public Kernel {
 public:
  explicit Dft(const Node& n)
      : axis_(n.attr_int("axis", 1)),
        inverse_(n.attr_int("inverse", 0) != 0),
        onesided_(n.attr_int("onesided", 0) != 0) {}
  void infer(InferContext& ctx) const override {
    Shape s = ctx.shape(0);
    VOLT_CHECK(s.size() >= 2 && (s.back() == 1 || s.back() == 2), InvalidArgument,
               ctx.node().describe() + ": input must be [..., n, 1] (real) or [..., n, 2] " +
                   "(complex), got " + shape_str(s));
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(s.size()) - 1, ctx.node());
    int64_t len = s[axis];
    if (ctx.has_input(1)) {
      const Tensor* l = ctx.input_tensor(1);
      if (!l) return ctx.set_output_unknown(0, ctx.dtype(0));
      len = scalar_int(*l, ctx.node(), "dft_length", 1, kMaxLength);
    }
    s[axis] = onesided_ ? len / 2 + 1 : len;
    s.back() = 2;
    ctx.set_output(0, ctx.dtype(0), s);
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Shape& s = x.shape();
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(s.size()) - 1, ctx.node());
    const int64_t n_in = s[axis], len = ctx.has_input(1) ? scalar_int(ctx.input(1), ctx.node(),
                                                                      "dft_length", 1, kMaxLength)
                                                         : n_in;
    const bool complex_in = s.back() == 2;
    Tensor& y = ctx.output(0);
    const int64_t n_out = y.dim(axis);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= s[d];
    for (size_t d = static_cast<size_t>(axis) + 1; d + 1 < s.size(); ++d) inner *= s[d];
    const std::vector<double> in = to_doubles(x);
    std::vector<double> out(static_cast<size_t>(y.numel()));
    const double sign = inverse_ ? 1 : -1;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i)
        for (int64_t k = 0; k < n_out; ++k) {
          std::complex<double> acc = 0;
          for (int64_t t = 0; t < std::min(len, n_in); ++t) {
            const int64_t e = ((o * n_in + t) * inner + i) * (complex_in ? 2 : 1);
            const std::complex<double> v(in[e], complex_in ? in[e + 1] : 0);
            acc += v * std::polar(1.0, sign * 2 * kPi * static_cast<double>(k * t) /
                                           static_cast<double>(len));
          }
          if (inverse_) acc /= static_cast<double>(len);
          const int64_t e = ((o * n_out + k) * inner + i) * 2;
          out[e] = acc.real();
          out[e + 1] = acc.imag();
        }
    fill_from(y, [&](int64_t i) { return out[i]; });
  }

 private:
  int64_t axis_;
  bool inverse_, onesided_;
};

class Stft final : public Kernel {
 public:
  explicit Stft(const Node& n) : onesided_(n.attr_int("onesided", 1) != 0) {}
  void infer(InferContext& ctx) const override {
    const Shape& s = ctx.shape(0);
    VOLT_CHECK(s.size() >= 2 && (!ctx.has_input(2) || !ctx.shape(2).empty()), InvalidArgument,
               ctx.node().describe() + ": signal must be [batch, length(, 2)] and the window 1-D");
    const Tensor* step = ctx.input_tensor(1);
    const Tensor* len_t = ctx.has_input(3) ? ctx.input_tensor(3) : nullptr;
    if (!step || (ctx.has_input(3) && !len_t)) return ctx.set_output_unknown(0, ctx.dtype(0));
    const int64_t len =
        len_t ? scalar_int(*len_t, ctx.node(), "frame_length", 1, kMaxLength) : ctx.shape(2)[0];
    const int64_t frames =
        (s[1] - len) / scalar_int(*step, ctx.node(), "frame_step", 1, kMaxLength) + 1;
    ctx.set_output(0, ctx.dtype(0), {s[0], frames, onesided_ ? len / 2 + 1 : len, 2});
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const int64_t step = scalar_int(ctx.input(1), ctx.node(), "frame_step", 1, kMaxLength);
    const bool has_window = ctx.has_input(2);
    const int64_t len = ctx.has_input(3)
                            ? scalar_int(ctx.input(3), ctx.node(), "frame_length", 1, kMaxLength)
                            : ctx.input(2).dim(0);
    const std::vector<double> sig = to_doubles(x);
    const std::vector<double> win = has_window ? to_doubles(ctx.input(2)) : std::vector<double>{};
    Tensor& y = ctx.output(0);
    const int64_t batch = x.dim(0), n = x.dim(1), frames = y.dim(1), bins = y.dim(2);
    const bool complex_in = x.rank() == 3 && x.dim(2) == 2;
    std::vector<double> out(static_cast<size_t>(y.numel()));
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t f = 0; f < frames; ++f)
        for (int64_t k = 0; k < bins; ++k) {
          std::complex<double> acc = 0;
          for (int64_t t = 0; t < len; ++t) {
            const int64_t e = (b * n + f * step + t) * (complex_in ? 2 : 1);
            const double w = has_window ? win[t] : 1.0;
            acc +=
                std::complex<double>(sig[e], complex_in ? sig[e + 1] : 0) * w *
                std::polar(1.0, -2 * kPi * static_cast<double>(k * t) / static_cast<double>(len));
          }
          const int64_t e = ((b * frames + f) * bins + k) * 2;
          out[e] = acc.real();
          out[e + 1] = acc.imag();
        }
    fill_from(y, [&](int64_t i) { return out[i]; });
  }

 private:
  bool onesided_;
};

class MelWeightMatrix final : public Kernel {
 public:
  explicit MelWeightMatrix(const Node& n)
      : dtype_(static_cast<DType>(n.attr_int("output_datatype", 1))) {}
  void infer(InferContext& ctx) const override {
    const Tensor *mel = ctx.input_tensor(0), *dft = ctx.input_tensor(1);
    if (!mel || !dft) return ctx.set_output_unknown(0, dtype_);
    ctx.set_output(0, dtype_,
                   {scalar_int(*dft, ctx.node(), "dft_length", 1, kMaxLength) / 2 + 1,
                    scalar_int(*mel, ctx.node(), "num_mel_bins", 1, kMaxLength)});
  }
  void run(RunContext& ctx) const override {
    const int64_t mel = scalar_int(ctx.input(0), ctx.node(), "num_mel_bins", 1, kMaxLength),
                  dft = scalar_int(ctx.input(1), ctx.node(), "dft_length", 1, kMaxLength);
    const double rate = scalar_value(ctx.input(2)), lo = scalar_value(ctx.input(3)),
                 hi = scalar_value(ctx.input(4));
    VOLT_CHECK(rate > 0 && std::isfinite(rate) && lo >= 0 && hi >= lo && std::isfinite(hi),
               InvalidArgument,
               ctx.node().describe() + ": needs sample_rate > 0 and 0 <= lower_edge_hertz <= " +
                   "upper_edge_hertz, all finite");
    const int64_t bins = dft / 2 + 1;
    auto to_mel = [](double hz) { return 2595 * std::log10(1 + hz / 700); };
    auto to_hz = [](double m) { return 700 * (std::pow(10, m / 2595) - 1); };
    // Mel-spaced band edges snapped to DFT bins, as the spec's reference computes them (the
    // mel step divides the range into num_mel_bins + 2 parts).
    std::vector<int64_t> edge(static_cast<size_t>(mel + 2));
    const double ml = to_mel(lo), mh = to_mel(hi), step = (mh - ml) / static_cast<double>(mel + 2);
    for (int64_t i = 0; i < mel + 2; ++i)
      edge[i] = static_cast<int64_t>(
          std::clamp(std::floor(static_cast<double>(dft + 1) *
                                to_hz(ml + static_cast<double>(i) * step) / rate),
                     -1.0, static_cast<double>(bins + 1)));
    std::vector<double> w(static_cast<size_t>(bins * mel), 0.0);
    auto set = [&](int64_t k, int64_t m, double v) {
      if (k >= 0 && k < bins) w[k * mel + m] = v;
    };
    for (int64_t m = 0; m < mel; ++m) {
      const int64_t l = edge[m], c = edge[m + 1], r = edge[m + 2];
      if (c == l)
        set(c, m, 1);
      else
        for (int64_t k = l; k <= c; ++k)
          set(k, m, static_cast<double>(k - l) / static_cast<double>(c - l));
      for (int64_t k = c; k < r; ++k)
        set(k, m, static_cast<double>(r - k) / static_cast<double>(r - c));
    }
    fill_from(ctx.output(0), [&](int64_t i) { return w[i]; });
  }

 private:
  DType dtype_;
};

}  // namespace

VOLT_REGISTER_KERNEL(hann_window,
                     {.op = "HannWindow", .since = 17, .create = [](const Node& n) {
                        return std::make_unique<Window>(n, std::vector<double>{0.5, 0.5});
                      }});
VOLT_REGISTER_KERNEL(
    hamming_window,
    {.op = "HammingWindow", .since = 17, .create = [](const Node& n) {
       return std::make_unique<Window>(n, std::vector<double>{25.0 / 46, 21.0 / 46});
     }});
VOLT_REGISTER_KERNEL(blackman_window,
                     {.op = "BlackmanWindow", .since = 17, .create = [](const Node& n) {
                        return std::make_unique<Window>(n, std::vector<double>{0.42, 0.5, 0.08});
                      }});
VOLT_REGISTER_KERNEL(dft, {.op = "DFT", .since = 17, .create = make_kernel<Dft>});
VOLT_REGISTER_KERNEL(stft, {.op = "STFT", .since = 17, .create = make_kernel<Stft>});
VOLT_REGISTER_KERNEL(mel_weight_matrix, {.op = "MelWeightMatrix",
                                         .since = 17,
                                         .create = make_kernel<MelWeightMatrix>});

}  // namespace volt
