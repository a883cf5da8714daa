// Quantization: QuantizeLinear, DequantizeLinear (per tensor or per axis), DynamicQuantizeLinear,
// MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv, as reference loops with exact
// integer accumulation and round-half-to-even requantization.
#include <cmath>

#include "operators/common/dispatch.hpp"
#include "operators/common/matmul_shapes.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/common/tensor_values.hpp"
#include "operators/cpu/quantization.hpp"
#include "operators/registry.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

// The index into a per-axis parameter (scale, zero point) for element e of x.
struct AxisIndexer {
  int64_t inner = 1, n = 1;
  bool per_axis = false;
  AxisIndexer(const Shape& x, const Tensor& param, int64_t axis_attr, const Node& node) {
    if (param.numel() <= 1) return;
    per_axis = true;
    const int64_t axis = normalize_axis(axis_attr, static_cast<int64_t>(x.size()), node);
    n = x[axis];
    VOLT_CHECK(
        param.numel() == n, InvalidArgument,
        node.describe() + ": per-axis parameters must have " + std::to_string(n) + " values");
    for (size_t d = static_cast<size_t>(axis) + 1; d < x.size(); ++d) inner *= x[d];
  }
  int64_t operator()(int64_t e) const { return per_axis ? (e / inner) % n : 0; }
};

// Checks a scale and zero point pair against the data they quantize: a constant scale must be
// positive and finite (zero divides, a negative one flips the data, NaN poisons it); the zero
// point must have the quantized data's type (an int8 tensor with a uint8 zero point would be
// read as the wrong integers).
void check_zero_point(const InferContext& ctx, size_t zp, DType quantized, const char* what) {
  if (ctx.has_input(zp) && ctx.dtype(zp) != quantized)
    ctx.error(std::string(what) + " zero point is " + dtype_name(ctx.dtype(zp)) +
              " but the data it shifts is " + dtype_name(quantized));
}
void check_quantization(const InferContext& ctx, size_t scale, size_t zp, DType quantized,
                        const char* what) {
  if (const Tensor* s = ctx.input_tensor(scale)) check_scales(*s, ctx.node(), what);
  check_zero_point(ctx, zp, quantized, what);
}

// Runs f(begin, count, parameter index) over spans of `numel` elements that share one scale and
// zero point, split into pieces the threads share (one per-tensor scale is one long span).
template <class F>
void for_each_span(int64_t numel, const AxisIndexer& idx, F&& f) {
  constexpr int64_t kPiece = 1 << 14;
  const int64_t block = idx.per_axis ? idx.inner : numel;
  if (block == 0) return;
  const int64_t blocks = numel / block, pieces = (block + kPiece - 1) / kPiece;
  parallel_for(blocks * pieces, numel > (1 << 16), [&](int64_t t) {
    const int64_t b = t / pieces, p = t % pieces;
    f(b * block + p * kPiece, std::min(kPiece, block - p * kPiece), idx(b * block));
  });
}

class QuantizeLinear final : public Kernel {
 public:
  explicit QuantizeLinear(const Node& n) : axis_(n.attr_int("axis", 1)) {}
  void infer(InferContext& ctx) const override {
    const DType y = ctx.has_input(2) ? ctx.dtype(2) : DType::UInt8;
    check_quantization(ctx, 1, 2, y, "y");
    ctx.set_output(0, y, ctx.shape(0));
  }
  void run(RunContext& ctx) const override {
    const Tensor &x = ctx.input(0), &scale = ctx.input(1);
    const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    Tensor& y = ctx.output(0);
    const AxisIndexer idx(x.shape(), scale, axis_, ctx.node());
    // A scale computed at run time: dividing by zero or a negative value has no quantized result.
    check_scales(scale, ctx.node(), "y");
    if (x.dtype() == DType::Float && scale.dtype() == DType::Float &&
        (y.dtype() == DType::UInt8 || y.dtype() == DType::Int8))
      return quantize_blocks(x, scale, zp, idx, y);
    for (int64_t e = 0; e < x.numel(); ++e) {
      const int64_t k = idx(e);
      const double q = value_at(x, e) / value_at(scale, k);
      store_integer(y, e, saturate(std::nearbyint(q) + (zp ? value_at(*zp, k) : 0), y.dtype()));
    }
  }

 private:
  // float -> 8 bits, one (scale, zero point) per block of `inner` elements.
  static void quantize_blocks(const Tensor& x, const Tensor& scale, const Tensor* zp,
                              const AxisIndexer& idx, Tensor& y) {
    const float* px = x.data<float>();
    for_each_span(x.numel(), idx, [&](int64_t begin, int64_t n, int64_t k) {
      const float s = scale.data<float>()[k];
      const int32_t z = zp ? static_cast<int32_t>(value_at(*zp, k)) : 0;
      if (y.dtype() == DType::UInt8)
        quantize_span(px + begin, n, s, z, y.data<uint8_t>() + begin);
      else
        quantize_span(px + begin, n, s, z, y.data<int8_t>() + begin);
    });
  }

  int64_t axis_;
};

class DequantizeLinear final : public Kernel {
 public:
  explicit DequantizeLinear(const Node& n) : axis_(n.attr_int("axis", 1)) {}
  void infer(InferContext& ctx) const override {
    check_quantization(ctx, 1, 2, ctx.dtype(0), "x");
    ctx.set_output(0, ctx.dtype(1), ctx.shape(0));
  }
  void run(RunContext& ctx) const override {
    const Tensor &x = ctx.input(0), &scale = ctx.input(1);
    const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    Tensor& y = ctx.output(0);
    const AxisIndexer idx(x.shape(), scale, axis_, ctx.node());
    if (y.dtype() == DType::Float && (x.dtype() == DType::UInt8 || x.dtype() == DType::Int8))
      return dequantize_blocks(x, scale, zp, idx, y);
    dispatch_numeric(y.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* py = static_cast<T*>(y.raw());
      for (int64_t e = 0; e < x.numel(); ++e) {
        const int64_t k = idx(e);
        py[e] = static_cast<T>(static_cast<typename Compute<T>::type>(
            (value_at(x, e) - (zp ? value_at(*zp, k) : 0)) * value_at(scale, k)));
      }
    });
  }

 private:
  static void dequantize_blocks(const Tensor& x, const Tensor& scale, const Tensor* zp,
                                const AxisIndexer& idx, Tensor& y) {
    for_each_span(x.numel(), idx, [&](int64_t begin, int64_t n, int64_t k) {
      const float s = static_cast<float>(value_at(scale, k));
      const int32_t z = zp ? static_cast<int32_t>(value_at(*zp, k)) : 0;
      float* py = y.data<float>() + begin;
      if (x.dtype() == DType::UInt8)
        dequantize_span(x.data<uint8_t>() + begin, n, z, s, py);
      else
        dequantize_span(x.data<int8_t>() + begin, n, z, s, py);
    });
  }

  int64_t axis_;
};

// min/max (the range always includes zero), then the same quantization as QuantizeLinear's.
class DynamicQuantizeLinear final : public Kernel {
 public:
  explicit DynamicQuantizeLinear(const Node&) {}
  void infer(InferContext& ctx) const override {
    ctx.set_output(0, DType::UInt8, ctx.shape(0));
    ctx.set_output(1, DType::Float, {});
    ctx.set_output(2, DType::UInt8, {});
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (x.dtype() == DType::Float) {
      const DynamicRange r = dynamic_range(x.data<float>(), x.numel());
      dynamic_quantize(x.data<float>(), x.numel(), r, y.data<uint8_t>());
      ctx.output(1).data<float>()[0] = r.scale;
      ctx.output(2).data<uint8_t>()[0] = static_cast<uint8_t>(r.zero_point);
      return;
    }
    double mn = 0, mx = 0;
    for (int64_t e = 0; e < x.numel(); ++e) {
      mn = std::min(mn, value_at(x, e));
      mx = std::max(mx, value_at(x, e));
    }
    const float scale = static_cast<float>((mx - mn) / 255.0);
    const int64_t zp = scale == 0 ? 0 : saturate(-mn / static_cast<double>(scale), DType::UInt8);
    // In float32, as the spec computes it: the rounding of x / scale depends on it.
    for (int64_t e = 0; e < x.numel(); ++e)
      store_integer(y, e,
                    scale == 0 ? zp
                               : saturate(std::nearbyint(static_cast<double>(
                                              static_cast<float>(value_at(x, e)) / scale)) +
                                              static_cast<double>(zp),
                                          DType::UInt8));
    ctx.output(1).data<float>()[0] = scale;
    ctx.output(2).data<uint8_t>()[0] = static_cast<uint8_t>(zp);
  }
};

// A quantization parameter read per tensor (one value) or per row / column (`n` values): any
// other size would be read past.
void check_per_tensor_or(const InferContext& ctx, size_t input, int64_t n, const char* what) {
  if (!ctx.has_input(input)) return;
  const int64_t got = numel_of(ctx.shape(input));
  if (got != 1 && got != n)
    ctx.input_error(std::string(what) + " has " + std::to_string(got) + " values, expected 1" +
                    (n != 1 ? " or " + std::to_string(n) : std::string()));
}

class MatMulInteger final : public Kernel {
 public:
  explicit MatMulInteger(const Node&) {}
  void infer(InferContext& ctx) const override {
    const MatMulShapes s = matmul_shapes(ctx.shape(0), ctx.shape(1), ctx.node());
    check_per_tensor_or(ctx, 2, s.m, "a_zero_point");
    check_per_tensor_or(ctx, 3, s.n, "b_zero_point");
    check_zero_point(ctx, 2, ctx.dtype(0), "a");
    check_zero_point(ctx, 3, ctx.dtype(1), "b");
    ctx.set_output(0, DType::Int32, s.result);
    ctx.runs_reference_loop("");
  }
  void run(RunContext& ctx) const override {
    const MatMulShapes s = matmul_shapes(ctx.input(0).shape(), ctx.input(1).shape(), ctx.node());
    auto y = integer_matmul(ctx.input(0), ctx.input(1), ctx.has_input(2) ? &ctx.input(2) : nullptr,
                            ctx.has_input(3) ? &ctx.input(3) : nullptr, s);
    int32_t* p = ctx.output(0).data<int32_t>();
    for (size_t i = 0; i < y.size(); ++i) p[i] = static_cast<int32_t>(y[i]);
  }
};

class QLinearMatMul final : public Kernel {
 public:
  explicit QLinearMatMul(const Node&) {}
  void infer(InferContext& ctx) const override {
    const MatMulShapes s = matmul_shapes(ctx.shape(0), ctx.shape(3), ctx.node());
    check_per_tensor_or(ctx, 1, s.m, "a_scale");
    check_per_tensor_or(ctx, 2, s.m, "a_zero_point");
    check_per_tensor_or(ctx, 4, s.n, "b_scale");
    check_per_tensor_or(ctx, 5, s.n, "b_zero_point");
    check_per_tensor_or(ctx, 6, 1, "y_scale");
    check_per_tensor_or(ctx, 7, 1, "y_zero_point");
    check_quantization(ctx, 1, 2, ctx.dtype(0), "a");
    check_quantization(ctx, 4, 5, ctx.dtype(3), "b");
    check_quantization(ctx, 6, 7, ctx.dtype(7), "y");
    ctx.set_output(0, ctx.dtype(7), s.result);
    ctx.runs_reference_loop("");
  }
  void run(RunContext& ctx) const override {
    const MatMulShapes s = matmul_shapes(ctx.input(0).shape(), ctx.input(3).shape(), ctx.node());
    auto acc = integer_matmul(ctx.input(0), ctx.input(3), &ctx.input(2), &ctx.input(5), s);
    const Tensor &as = ctx.input(1), &bs = ctx.input(4), &ys = ctx.input(6), &yzp = ctx.input(7);
    Tensor& y = ctx.output(0);
    for (size_t e = 0; e < acc.size(); ++e) {
      const int64_t j = static_cast<int64_t>(e) % s.n, i = static_cast<int64_t>(e) / s.n % s.m;
      const double scale = value_at(as, as.numel() > 1 ? i : 0) *
                           value_at(bs, bs.numel() > 1 ? j : 0) / value_at(ys, 0);
      store_integer(y, static_cast<int64_t>(e),
                    saturate(static_cast<double>(acc[e]) * scale + value_at(yzp, 0), y.dtype()));
    }
  }
};

// Integer convolution: x and w shifted by their zero points into int32, accumulated exactly.
class IntegerConv final : public Kernel {
 public:
  IntegerConv(const Node& n, bool qlinear)
      : attrs_(n), group_(n.attr_int("group", 1)), qlinear_(qlinear) {}
  void infer(InferContext& ctx) const override {
    const size_t wi = qlinear_ ? 3 : 1;
    const ConvShapes shapes = conv_shapes(attrs_, group_, ctx.shape(0), ctx.shape(wi), ctx.node());
    // Scales and zero points are read per tensor (one value) or, for the weights, per output
    // channel (M values); the bias has M. Anything else would be read past.
    const int64_t m = ctx.shape(wi)[0];
    auto expect = [&](size_t i, bool per_channel_ok, const char* what) {
      check_per_tensor_or(ctx, i, per_channel_ok ? m : 1, what);
    };
    if (qlinear_) {
      expect(1, false, "x_scale");
      expect(2, false, "x_zero_point");
      expect(4, true, "w_scale");
      expect(5, true, "w_zero_point");
      expect(6, false, "y_scale");
      expect(7, false, "y_zero_point");
      check_quantization(ctx, 1, 2, ctx.dtype(0), "x");
      check_quantization(ctx, 4, 5, ctx.dtype(3), "w");
      check_quantization(ctx, 6, 7, ctx.dtype(7), "y");
      if (ctx.has_input(8) && numel_of(ctx.shape(8)) != m)
        ctx.input_error("B must have one value per output channel");
    } else {
      expect(2, false, "x_zero_point");
      expect(3, true, "w_zero_point");
      check_zero_point(ctx, 2, ctx.dtype(0), "x");
      check_zero_point(ctx, 3, ctx.dtype(1), "w");
    }
    ctx.set_output(0, qlinear_ ? ctx.dtype(7) : DType::Int32, shapes.out);
    ctx.runs_reference_loop("");
  }
  void run(RunContext& ctx) const override {
    const size_t wi = qlinear_ ? 3 : 1;
    const Tensor &x = ctx.input(0), &w = ctx.input(wi);
    const Tensor* xzp = qlinear_ ? &ctx.input(2) : (ctx.has_input(2) ? &ctx.input(2) : nullptr);
    const Tensor* wzp = qlinear_ ? &ctx.input(5) : (ctx.has_input(3) ? &ctx.input(3) : nullptr);
    const ConvShapes s = conv_shapes(attrs_, group_, x.shape(), w.shape(), ctx.node());
    Tensor acc = integer_conv(s, x, xzp ? static_cast<int64_t>(value_at(*xzp, 0)) : 0, w, wzp);
    if (qlinear_ && ctx.has_input(8)) {  // the bias is in the accumulator's units
      const int32_t* b = ctx.input(8).data<int32_t>();
      const int64_t per_channel = acc.numel() / std::max<int64_t>(s.n * s.m, 1);
      for (int64_t e = 0; e < acc.numel(); ++e)
        acc.data<int32_t>()[e] = static_cast<int32_t>(static_cast<int64_t>(acc.data<int32_t>()[e]) +
                                                      b[(e / per_channel) % s.m]);
    }
    Tensor& y = ctx.output(0);
    if (!qlinear_) {
      std::memcpy(y.raw(), acc.raw(), acc.nbytes());
      return;
    }
    const Tensor &xs = ctx.input(1), &ws = ctx.input(4), &ys = ctx.input(6), &yzp = ctx.input(7);
    const int64_t per_channel = acc.numel() / std::max<int64_t>(s.n * s.m, 1);
    for (int64_t e = 0; e < acc.numel(); ++e) {
      const int64_t m = (e / per_channel) % s.m;
      const double scale = value_at(xs, 0) * value_at(ws, ws.numel() > 1 ? m : 0) / value_at(ys, 0);
      store_integer(y, e,
                    saturate(static_cast<double>(acc.data<int32_t>()[e]) * scale + value_at(yzp, 0),
                             y.dtype()));
    }
  }

 private:
  WindowAttributes attrs_;
  int64_t group_;
  bool qlinear_;
};

}  // namespace

VOLT_REGISTER_KERNEL(quantize_linear,
                     {.op = "QuantizeLinear", .since = 10, .create = make_kernel<QuantizeLinear>});
VOLT_REGISTER_KERNEL(dequantize_linear, {.op = "DequantizeLinear",
                                         .since = 10,
                                         .create = make_kernel<DequantizeLinear>});
VOLT_REGISTER_KERNEL(dynamic_quantize_linear, {.op = "DynamicQuantizeLinear",
                                               .since = 11,
                                               .create = make_kernel<DynamicQuantizeLinear>});
VOLT_REGISTER_KERNEL(matmul_integer,
                     {.op = "MatMulInteger", .since = 10, .create = make_kernel<MatMulInteger>});
VOLT_REGISTER_KERNEL(qlinear_matmul,
                     {.op = "QLinearMatMul", .since = 10, .create = make_kernel<QLinearMatMul>});
VOLT_REGISTER_KERNEL(conv_integer, {.op = "ConvInteger", .since = 10, .create = [](const Node& n) {
                                      return std::make_unique<IntegerConv>(n, false);
                                    }});
VOLT_REGISTER_KERNEL(qlinear_conv, {.op = "QLinearConv", .since = 10, .create = [](const Node& n) {
                                      return std::make_unique<IntegerConv>(n, true);
                                    }});

}  // namespace volt
