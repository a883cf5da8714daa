// Quantization: QuantizeLinear, DequantizeLinear (per tensor or per axis), DynamicQuantizeLinear,
// MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv, as reference loops with exact
// integer accumulation and round-half-to-even requantization.
#include <cmath>

#include "operators/common/dispatch.hpp"
#include "operators/common/matmul_shapes.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/common/tensor_values.hpp"
#include "operators/cpu/conv_reference.hpp"
#include "operators/registry.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

// Rounds half to even and saturates into the range of the quantized type.
int64_t saturate(double v, DType t) {
  const double r = std::nearbyint(v);
  double lo = 0, hi = 255;
  if (t == DType::Int8)
    lo = -128, hi = 127;
  else if (t == DType::Int32)
    lo = -2147483648.0, hi = 2147483647.0;
  else if (t == DType::UInt16)
    hi = 65535;
  else if (t == DType::Int16)
    lo = -32768, hi = 32767;
  // NaN (from a zero scale, or a NaN input) has no quantized value; it becomes 0 rather than
  // the undefined result of converting NaN to an integer.
  if (std::isnan(r)) return 0;
  return static_cast<int64_t>(std::clamp(r, lo, hi));
}

void store(Tensor& t, int64_t i, int64_t v) {
  switch (t.dtype()) {
    case DType::UInt8:
      t.data<uint8_t>()[i] = static_cast<uint8_t>(v);
      break;
    case DType::Int8:
      t.data<int8_t>()[i] = static_cast<int8_t>(v);
      break;
    case DType::Int32:
      t.data<int32_t>()[i] = static_cast<int32_t>(v);
      break;
    case DType::UInt16:
      t.data<uint16_t>()[i] = static_cast<uint16_t>(v);
      break;
    case DType::Int16:
      t.data<int16_t>()[i] = static_cast<int16_t>(v);
      break;
    default:
      fail(ErrorCode::NotImplemented,
           std::string("quantized type ") + dtype_name(t.dtype()) + " is not supported");
  }
}

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

class QuantizeLinear final : public Kernel {
 public:
  explicit QuantizeLinear(const Node& n) : axis_(n.attr_int("axis", 1)) {}
  void infer(InferContext& ctx) const override {
    ctx.set_output(0, ctx.has_input(2) ? ctx.dtype(2) : DType::UInt8, ctx.shape(0));
  }
  void run(RunContext& ctx) const override {
    const Tensor &x = ctx.input(0), &scale = ctx.input(1);
    const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    Tensor& y = ctx.output(0);
    const AxisIndexer idx(x.shape(), scale, axis_, ctx.node());
    for (int64_t e = 0; e < x.numel(); ++e) {
      const int64_t k = idx(e);
      const double q = x.dtype() == DType::Float
                           ? static_cast<double>(static_cast<float>(value_at(x, e)) /
                                                 static_cast<float>(value_at(scale, k)))
                           : value_at(x, e) / value_at(scale, k);
      store(y, e,
            saturate(std::nearbyint(q) + (zp ? value_at(*zp, k) : 0),
                     y.dtype()));  // round, then shift
    }
  }

 private:
  int64_t axis_;
};

class DequantizeLinear final : public Kernel {
 public:
  explicit DequantizeLinear(const Node& n) : axis_(n.attr_int("axis", 1)) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.dtype(1), ctx.shape(0)); }
  void run(RunContext& ctx) const override {
    const Tensor &x = ctx.input(0), &scale = ctx.input(1);
    const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    Tensor& y = ctx.output(0);
    const AxisIndexer idx(x.shape(), scale, axis_, ctx.node());
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
  int64_t axis_;
};

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
    double mn = 0, mx = 0;  // the range always includes zero
    for (int64_t e = 0; e < x.numel(); ++e) {
      mn = std::min(mn, value_at(x, e));
      mx = std::max(mx, value_at(x, e));
    }
    const float scale = static_cast<float>((mx - mn) / 255.0);
    const int64_t zp = scale == 0 ? 0 : saturate(-mn / static_cast<double>(scale), DType::UInt8);
    Tensor& y = ctx.output(0);
    // In float32, as the spec computes it: the rounding of x / scale depends on it.
    for (int64_t e = 0; e < x.numel(); ++e)
      store(y, e,
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

// (A - a_zp) x (B - b_zp) in int64 over numpy matmul's shapes (1-D operands, broadcast batch
// axes); a_zp per row or scalar, b_zp per column or scalar (sizes checked at plan time).
std::vector<int64_t> integer_matmul(const Tensor& a, const Tensor& b, const Tensor* azp,
                                    const Tensor* bzp, const MatMulShapes& s) {
  const MatMulBatches batches(s);
  const int64_t m = s.m, k = s.k, n = s.n;
  std::vector<int64_t> y(static_cast<size_t>(batches.count() * m * n), 0);
  for (int64_t bi = 0; bi < batches.count(); ++bi) {
    int64_t ia, ib;
    batches.operands(bi, ia, ib);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        int64_t acc = 0;
        const double za = azp ? value_at(*azp, azp->numel() > 1 ? i : 0) : 0,
                     zb = bzp ? value_at(*bzp, bzp->numel() > 1 ? j : 0) : 0;
        for (int64_t p = 0; p < k; ++p)
          acc += static_cast<int64_t>(value_at(a, (ia * m + i) * k + p) - za) *
                 static_cast<int64_t>(value_at(b, (ib * k + p) * n + j) - zb);
        y[static_cast<size_t>((bi * m + i) * n + j)] = acc;
      }
  }
  return y;
}

class MatMulInteger final : public Kernel {
 public:
  explicit MatMulInteger(const Node&) {}
  void infer(InferContext& ctx) const override {
    const MatMulShapes s = matmul_shapes(ctx.shape(0), ctx.shape(1), ctx.node());
    check_per_tensor_or(ctx, 2, s.m, "a_zero_point");
    check_per_tensor_or(ctx, 3, s.n, "b_zero_point");
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
      store(y, static_cast<int64_t>(e),
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
      if (ctx.has_input(8) && numel_of(ctx.shape(8)) != m)
        ctx.input_error("B must have one value per output channel");
    } else {
      expect(2, false, "x_zero_point");
      expect(3, true, "w_zero_point");
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
    Tensor xi = allocate_tensor(DType::Int32, x.shape()),
           wq = allocate_tensor(DType::Int32, w.shape());
    for (int64_t e = 0; e < x.numel(); ++e)
      xi.data<int32_t>()[e] = static_cast<int32_t>(value_at(x, e) - (xzp ? value_at(*xzp, 0) : 0));
    const int64_t per_m = w.numel() / std::max<int64_t>(w.dim(0), 1);
    for (int64_t e = 0; e < w.numel(); ++e)
      wq.data<int32_t>()[e] = static_cast<int32_t>(
          value_at(w, e) - (wzp ? value_at(*wzp, wzp->numel() > 1 ? e / per_m : 0) : 0));
    Tensor bias;
    if (qlinear_ && ctx.has_input(8)) bias = ctx.input(8);
    Tensor acc = allocate_tensor(DType::Int32, s.out);
    reference_conv<int32_t, int64_t>(s, xi.data<int32_t>(), wq.data<int32_t>(),
                                     bias.defined() ? bias.data<int32_t>() : nullptr,
                                     acc.data<int32_t>());
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
      store(y, e,
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
