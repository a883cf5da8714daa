// Every quantized form of a convolution or matrix product becomes one ai.volt QuantizedConv or
// QuantizedMatMul (operators/cpu/quantized_linear.cpp, oneDNN's int8 primitives):
//
//   ConvInteger / MatMulInteger (dynamic quantization: DynamicQuantizeLinear before them, then
//     Cast -> Mul by the scales -> Add the bias after them)
//   QLinearConv / QLinearMatMul
//   DequantizeLinear(x) and DequantizeLinear(w) -> Conv / MatMul / Gemm [-> QuantizeLinear]
//     (the QDQ form static quantizers write)
//
// and then takes in the chain after it while it can: Cast to float, Mul by constant scales
// (per tensor or per output channel) or by a run-time scalar (the dynamic quantizer's scale, or
// its product with constant weight scales), Add of a constant per-channel bias, an activation,
// and QuantizeLinear to 8 bits (so activations stay 8-bit from one quantized layer to the next).
// Weights must be constant, with values minus their zero point inside int8 (any symmetric or
// zero-point-128 quantization); others keep the ONNX kernels. DequantizeLinear of a constant
// that nothing took in (weight-only quantization feeding a float op) is folded to a float
// constant once.
#include <algorithm>
#include <cmath>
#include <optional>

#include "operators/common/tensor_values.hpp"
#include "operators/registry.hpp"
#include "runtime/passes/passes.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

// Positive finite float scales, one per tensor or `channels` of them; nullopt otherwise (the
// ONNX kernel then reports the bad value).
std::optional<std::vector<double>> scales_of(const Graph& g, const std::string& name,
                                             int64_t channels) {
  const Tensor* t = constant_value(g, name);
  if (!t || t->dtype() != DType::Float || (t->numel() != 1 && t->numel() != channels))
    return std::nullopt;
  std::vector<double> v;
  for (int64_t i = 0; i < t->numel(); ++i) {
    v.push_back(value_at(*t, i));
    if (!(v.back() > 0) || !std::isfinite(v.back())) return std::nullopt;
  }
  return v;
}

double at(const std::vector<double>& v, int64_t i) {
  return v.size() == 1 ? v[0] : v[static_cast<size_t>(i)];
}

// W - zero point as int8, in the kernel's layout: Conv's [M, C/group, k...] (channel axis 0) or
// MatMul's [K, N] (channel axis 1, transposed from Gemm's [N, K] when `transposed`).
std::optional<Tensor> int8_weights(const Graph& g, const std::string& w_name,
                                   const std::string& zp_name, bool conv, bool transposed) {
  const Tensor* w = constant_value(g, w_name);
  if (!w || (w->dtype() != DType::Int8 && w->dtype() != DType::UInt8)) return std::nullopt;
  if (conv ? w->rank() < 3 : w->rank() != 2) return std::nullopt;
  const int64_t rows = w->shape()[0], cols = w->numel() / std::max<int64_t>(rows, 1);
  const int64_t channels = conv || transposed ? rows : cols;
  const Tensor* zp = zp_name.empty() ? nullptr : constant_value(g, zp_name);
  if (!zp_name.empty() &&
      (!zp || zp->dtype() != w->dtype() || (zp->numel() != 1 && zp->numel() != channels)))
    return std::nullopt;
  Shape shape = w->shape();
  if (transposed) shape = {cols, rows};
  Tensor out = allocate_tensor(DType::Int8, shape);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t channel = conv || transposed ? r : c;
      const double v =
          value_at(*w, r * cols + c) - (zp ? value_at(*zp, zp->numel() == 1 ? 0 : channel) : 0.0);
      if (v < -128 || v > 127) return std::nullopt;
      out.data<int8_t>()[transposed ? c * rows + r : r * cols + c] = static_cast<int8_t>(v);
    }
  return out;
}

// The per-channel values of a constant that broadcasts along the output's channel axis (axis 1
// of a rank-`rank` convolution output, the last axis of a product) and nowhere else.
std::optional<std::vector<double>> channel_values(const Tensor* t, int64_t channels, bool conv,
                                                  int rank) {
  if (!t || t->dtype() != DType::Float || static_cast<int>(t->rank()) > rank) return std::nullopt;
  if (t->numel() != 1) {
    if (t->numel() != channels) return std::nullopt;
    const int axis =
        conv ? 1 - (rank - static_cast<int>(t->rank())) : static_cast<int>(t->rank()) - 1;
    if (axis < 0 || t->shape()[static_cast<size_t>(axis)] != channels) return std::nullopt;
  }
  std::vector<double> v;
  for (int64_t i = 0; i < t->numel(); ++i) v.push_back(value_at(*t, i));
  return v;
}

// Whether `v` is output `k` of a DynamicQuantizeLinear (1: its scale, 2: its zero point; both
// one value, known at run time).
bool dynamic_quantizer_output(const Graph& g, const ValueUses& uses, const std::string& v,
                              size_t k) {
  const auto p = uses.producer(v);
  return p && is_onnx_op(g.nodes[*p], "DynamicQuantizeLinear") && g.nodes[*p].outputs.size() > k &&
         g.nodes[*p].outputs[k] == v;
}
bool dynamic_scale(const Graph& g, const ValueUses& uses, const std::string& v) {
  return dynamic_quantizer_output(g, uses, v, 1);
}

// The value of DequantizeLinear `n` when its inputs are constants with valid parameters.
std::optional<Tensor> dequantized_constant(const Graph& g, const Node& n) {
  const Tensor* x = constant_value(g, n.inputs[0]);
  const Tensor* s = constant_value(g, n.inputs[1]);
  const bool has_zp = n.inputs.size() > 2 && !n.inputs[2].empty();
  const Tensor* z = has_zp ? constant_value(g, n.inputs[2]) : nullptr;
  if (!x || !s || (has_zp && !z) || s->dtype() != DType::Float) return std::nullopt;
  if (x->dtype() != DType::Int8 && x->dtype() != DType::UInt8 && x->dtype() != DType::Int32)
    return std::nullopt;
  if (z && z->dtype() != x->dtype()) return std::nullopt;  // the kernel reports it
  int64_t axis = n.attr_int("axis", 1), inner = 1;
  if (s->numel() > 1) {
    if (axis < 0) axis += static_cast<int64_t>(x->rank());
    if (axis < 0 || axis >= static_cast<int64_t>(x->rank()) ||
        x->shape()[static_cast<size_t>(axis)] != s->numel() || (z && z->numel() != s->numel()))
      return std::nullopt;
    for (size_t d = static_cast<size_t>(axis) + 1; d < x->rank(); ++d) inner *= x->shape()[d];
  }
  for (int64_t i = 0; i < s->numel(); ++i)
    if (!(value_at(*s, i) > 0) || !std::isfinite(value_at(*s, i))) return std::nullopt;
  Tensor y = allocate_tensor(DType::Float, x->shape());
  for (int64_t e = 0; e < x->numel(); ++e) {
    const int64_t k = s->numel() > 1 ? (e / inner) % s->numel() : 0;
    y.data<float>()[e] =
        static_cast<float>(value_at(*x, e) - (z ? value_at(*z, z->numel() > 1 ? k : 0) : 0)) *
        static_cast<float>(value_at(*s, k));
  }
  return y;
}

// Whether `v` is known to be one value: absent, a one-element constant, or a
// DynamicQuantizeLinear's zero point. (The int8 primitives take one zero point for X; a per-row
// one, which MatMulInteger allows, keeps the ONNX kernel.)
bool scalar_zero_point(const Graph& g, const ValueUses& uses, const std::string& v) {
  if (v.empty()) return true;
  if (const Tensor* t = constant_value(g, v)) return t->numel() == 1;
  return dynamic_quantizer_output(g, uses, v, 2);
}

// The quantized layer being built.
struct Lowering {
  Node* first = nullptr;  // the node it starts from
  Node* last = nullptr;   // the last node taken in (the fused node goes where it is)
  bool conv = true;
  int rank = 2;  // of the output (conv: W's rank; product: 2 unless X's rank is declared)
  int64_t channels = 0;
  std::string x, x_zp, multiplier, y_zp, output, residual;
  // The residual's factor into Y's units and its zero point: an 8-bit residual's scale (1 for a
  // float one), divided by Y's scale when the layer writes 8 bits.
  double residual_scale = 1.0;
  int64_t residual_zero_point = 0;
  Tensor weights;
  std::vector<double> scales{1.0}, bias;
  DType out = DType::Float;
  std::map<std::string, Attribute> activation;
  std::string activation_kind;
};

class Lowerer {
 public:
  explicit Lowerer(const Graph& graph) : rw_(graph), g_(rw_.graph()) {}

  Graph run() {
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      Node& n = g_.nodes[i];
      if (rw_.removed(&n) || n.domain != kOnnxDomain) continue;
      std::optional<Lowering> q;
      if (n.op_type == "ConvInteger" || n.op_type == "MatMulInteger")
        q = from_integer(n);
      else if (n.op_type == "QLinearConv" || n.op_type == "QLinearMatMul")
        q = from_qlinear(n);
      else if (n.op_type == "Conv" || n.op_type == "MatMul" || n.op_type == "Gemm")
        q = from_qdq(n);
      if (!q) continue;
      take_epilogue(*q);
      emit(*q);
    }
    fuse_quantized_elementwise();
    fold_constant_dequantize();
    return rw_.finish();
  }

 private:
  void set_rank(Lowering& q, const Node& n) {
    // A product's output rank is X's; undeclared, only scalars and [N] are known to broadcast
    // without changing the output's shape.
    q.rank =
        q.conv ? static_cast<int>(q.weights.rank()) : std::max(1, declared_rank(g_, n.inputs[0]));
    q.channels = q.conv ? q.weights.shape()[0] : q.weights.shape()[1];
  }

  std::optional<Lowering> from_integer(Node& n) {
    Lowering q;
    q.conv = n.op_type == "ConvInteger";
    const std::string wz = n.inputs.size() > 3 ? n.inputs[3] : "";
    auto w = int8_weights(g_, n.inputs[1], wz, q.conv, false);
    if (!w) return std::nullopt;
    q.weights = std::move(*w);
    q.first = q.last = &n;
    q.x = n.inputs[0];
    q.x_zp = n.inputs.size() > 2 ? n.inputs[2] : "";
    if (!scalar_zero_point(g_, rw_.uses(), q.x_zp)) return std::nullopt;
    q.out = DType::Int32;
    q.output = n.outputs[0];
    set_rank(q, n);
    return q;
  }

  std::optional<Lowering> from_qlinear(Node& n) {
    Lowering q;
    q.conv = n.op_type == "QLinearConv";
    if (n.inputs.size() < 8) return std::nullopt;
    auto w = int8_weights(g_, n.inputs[3], n.inputs[5], q.conv, false);
    if (!w) return std::nullopt;
    q.weights = std::move(*w);
    set_rank(q, n);
    const auto xs = scales_of(g_, n.inputs[1], 1), ws = scales_of(g_, n.inputs[4], q.channels),
               ys = scales_of(g_, n.inputs[6], 1);
    if (!xs || !ws || !ys) return std::nullopt;
    const Tensor* yz = constant_value(g_, n.inputs[7]);
    if (!yz || (yz->dtype() != DType::UInt8 && yz->dtype() != DType::Int8)) return std::nullopt;
    q.scales.clear();
    for (int64_t c = 0; c < (ws->size() > 1 ? q.channels : 1); ++c)
      q.scales.push_back((*xs)[0] * at(*ws, c) / (*ys)[0]);
    if (q.conv && n.has_input(8)) {  // int32, in the accumulator's units
      const Tensor* b = constant_value(g_, n.inputs[8]);
      if (!b || b->dtype() != DType::Int32 || b->numel() != q.channels) return std::nullopt;
      for (int64_t c = 0; c < q.channels; ++c) q.bias.push_back(value_at(*b, c) * at(q.scales, c));
    }
    q.first = q.last = &n;
    q.x = n.inputs[0];
    q.x_zp = n.inputs[2];
    if (!scalar_zero_point(g_, rw_.uses(), q.x_zp)) return std::nullopt;
    q.y_zp = n.inputs[7];
    q.out = yz->dtype();
    q.output = n.outputs[0];
    return q;
  }

  // DequantizeLinear(xq, constant scale, zero point) feeding input `i` of n.
  const Node* dequantized(const Node& n, size_t i) const {
    const auto p = rw_.uses().producer(n.inputs[i]);
    if (!p) return nullptr;
    const Node& dq = g_.nodes[*p];
    return is_onnx_op(dq, "DequantizeLinear") && dq.inputs.size() >= 2 ? &dq : nullptr;
  }

  std::optional<Lowering> from_qdq(Node& n) {
    Lowering q;
    q.conv = n.op_type == "Conv";
    const bool gemm = n.op_type == "Gemm";
    if (n.inputs.size() < 2 || n.inputs.size() > 4 || n.outputs.size() != 1) return std::nullopt;
    if (n.inputs.size() == 4 && !q.conv) return std::nullopt;
    if (gemm && (n.attr_int("transA", 0) != 0 || n.attr_float("alpha", 1.0f) != 1.0f ||
                 n.attr_float("beta", 1.0f) != 1.0f))
      return std::nullopt;
    const Node *dx = dequantized(n, 0), *dw = dequantized(n, 1);
    if (!dx || !dw) return std::nullopt;
    const Tensor* xq_zp = dx->inputs.size() > 2 && !dx->inputs[2].empty()
                              ? constant_value(g_, dx->inputs[2])
                              : nullptr;
    if (dx->inputs.size() > 2 && !dx->inputs[2].empty() && !xq_zp) return std::nullopt;
    const bool transposed = gemm && n.attr_int("transB", 0) != 0;
    auto w = int8_weights(g_, dw->inputs[0], dw->inputs.size() > 2 ? dw->inputs[2] : "", q.conv,
                          transposed);
    if (!w) return std::nullopt;
    q.weights = std::move(*w);
    set_rank(q, n);
    const auto xs = scales_of(g_, dx->inputs[1], 1), ws = scales_of(g_, dw->inputs[1], q.channels);
    if (!xs || !ws) return std::nullopt;
    if (ws->size() > 1) {  // per channel: along the output channels of W as stored
      const int64_t axis = dw->attr_int("axis", 1);
      const int64_t want = q.conv || transposed ? 0 : 1;
      if (axis != want &&
          axis != want - static_cast<int64_t>(constant_value(g_, dw->inputs[0])->rank()))
        return std::nullopt;
    }
    q.scales.clear();
    for (int64_t c = 0; c < (ws->size() > 1 ? q.channels : 1); ++c)
      q.scales.push_back((*xs)[0] * at(*ws, c));
    if ((q.conv || gemm) && n.has_input(2)) {
      const auto b = channel_values(float_constant(n.inputs[2]), q.channels, false, 1);
      if (!b || b->size() != static_cast<size_t>(q.channels)) return std::nullopt;
      q.bias = *b;
    }
    if (n.inputs.size() == 4) set_residual(q, n.inputs[3]);               // fuse_conv_activation's
    for (const char* a : {"volt.activation", "volt.alpha", "volt.beta"})  // fuse_conv_activation's
      if (n.attributes.count(a)) q.activation[a] = n.attributes.at(a);
    if (q.activation.count("volt.activation"))
      q.activation_kind = q.activation.at("volt.activation").s;
    q.first = q.last = &n;
    q.x = dx->inputs[0];
    q.x_zp = dx->inputs.size() > 2 ? dx->inputs[2] : "";
    q.out = DType::Float;
    q.output = n.outputs[0];
    return q;
  }

  // Cast, Mul, Add, activation, QuantizeLinear after the layer, as far as they fold.
  void take_epilogue(Lowering& q) {
    auto absorb = [&](Node* n) {
      rw_.remove(n);
      q.last = n;
      q.output = n->outputs[0];
    };
    if (q.out == DType::Int32) {
      Node* cast = rw_.sole_reader(q.output, "Cast");
      if (!cast || cast->attr_int("to", 0) != static_cast<int64_t>(DType::Float)) return;
      q.out = DType::Float;
      absorb(cast);
    }
    if (q.out != DType::Float) return;
    if (!q.activation_kind.empty() || !q.residual.empty())
      return take_quantize(q);  // the layer's own activation (or residual) came last
    // Scales: constants, or a run-time scalar (times constants).
    while (Node* mul = rw_.sole_reader(q.output, "Mul")) {
      if (!q.bias.empty()) break;
      const std::string& other = mul->inputs[0] == q.output ? mul->inputs[1] : mul->inputs[0];
      std::vector<double> c;
      if (auto v = channel_values(constant_value(g_, other), q.channels, q.conv, q.rank)) {
        c = *v;
      } else if (q.multiplier.empty() && dynamic_scale(g_, rw_.uses(), other)) {
        q.multiplier = other;
        c = {1.0};
      } else if (const auto p = rw_.uses().producer(other);
                 q.multiplier.empty() && p && is_onnx_op(g_.nodes[*p], "Mul")) {
        // Mul(dynamic scale, constant weight scales), as dynamic quantizers write it.
        const Node& prod = g_.nodes[*p];
        const int s = dynamic_scale(g_, rw_.uses(), prod.inputs[0])   ? 0
                      : dynamic_scale(g_, rw_.uses(), prod.inputs[1]) ? 1
                                                                      : -1;
        if (s < 0) break;
        auto v = channel_values(constant_value(g_, prod.inputs[1 - s]), q.channels, q.conv, q.rank);
        if (!v) break;
        q.multiplier = prod.inputs[s];
        c = *v;
      } else {
        break;
      }
      std::vector<double> scaled;
      for (int64_t i = 0; i < (q.scales.size() > 1 || c.size() > 1 ? q.channels : 1); ++i)
        scaled.push_back(at(q.scales, i) * at(c, i));
      q.scales = scaled;
      absorb(mul);
    }
    if (Node* add = rw_.sole_reader(q.output, "Add")) {
      const std::string& other = add->inputs[0] == q.output ? add->inputs[1] : add->inputs[0];
      const auto b = channel_values(constant_value(g_, other), q.channels, q.conv, q.rank);
      if (b && other != q.output) {
        if (q.bias.empty()) q.bias.assign(static_cast<size_t>(q.channels), 0.0);
        for (int64_t c = 0; c < q.channels; ++c) q.bias[static_cast<size_t>(c)] += at(*b, c);
        absorb(add);
      }
    }
    // A residual: Add of a run-time value (ResNet's shortcut), before the activation.
    if (Node* add = rw_.sole_reader(q.output, "Add"); add && q.conv && add->inputs.size() == 2) {
      const std::string& other = add->inputs[0] == q.output ? add->inputs[1] : add->inputs[0];
      if (other != q.output && !constant_value(g_, other)) {
        set_residual(q, other);
        absorb(add);
      }
    }
    if (const auto r = rw_.uses().sole_reader(q.output); r && !rw_.removed(&g_.nodes[*r])) {
      Node& act = g_.nodes[*r];
      auto attrs = activation_attributes(g_, act);
      if (!attrs.empty() && act.inputs[0] == q.output) {
        q.activation = attrs;
        q.activation_kind = attrs.at("volt.activation").s;
        absorb(&act);
      }
    }
    take_quantize(q);
  }

  // The residual `v`; when a per-tensor DequantizeLinear makes it, its 8-bit input instead (the
  // post-ops dequantize it), so 8-bit blocks chain through their shortcuts too.
  void set_residual(Lowering& q, const std::string& v) {
    q.residual = v;
    const Node* dq = dequantize_producer(v);
    if (!dq) return;
    const auto params = per_tensor(*dq);
    if (!params || params->scale <= 0 || !std::isfinite(params->scale)) return;
    q.residual = dq->inputs[0];
    q.residual_scale = params->scale;
    q.residual_zero_point = params->zero_point;
  }

  // QuantizeLinear(v, constant scale, zero point): the layer writes 8 bits. Folds through the
  // activations that commute with a positive scale (Relu; Clip with its bounds scaled).
  void take_quantize(Lowering& q) {
    Node* quant = rw_.sole_reader(q.output, "QuantizeLinear");
    if (!quant || quant->inputs.size() < 2) return;
    const auto ys = scales_of(g_, quant->inputs[1], 1);
    if (!ys) return;
    DType type = DType::UInt8;
    if (quant->inputs.size() > 2 && !quant->inputs[2].empty()) {
      const Tensor* z = constant_value(g_, quant->inputs[2]);
      if (!z || z->numel() != 1 || (z->dtype() != DType::UInt8 && z->dtype() != DType::Int8))
        return;
      type = z->dtype();
    }
    const double inv = 1.0 / (*ys)[0];
    if (!q.activation_kind.empty() && q.activation_kind != "Relu") {
      if (q.activation_kind != "Clip") return;
      q.activation["volt.alpha"].f = static_cast<float>(q.activation.at("volt.alpha").f * inv);
      if (q.activation.count("volt.beta"))
        q.activation["volt.beta"].f = static_cast<float>(q.activation.at("volt.beta").f * inv);
    }
    for (double& s : q.scales) s *= inv;
    for (double& b : q.bias) b *= inv;
    q.residual_scale *= inv;
    q.out = type;
    q.y_zp = quant->inputs.size() > 2 ? quant->inputs[2] : "";
    rw_.remove(quant);
    q.last = quant;
    q.output = quant->outputs[0];
  }

  std::string add_initializer(const std::string& name, Tensor t) {
    std::string unique = name;
    for (int i = 1; g_.is_initializer(unique); ++i) unique = name + "." + std::to_string(i);
    g_.initializers[unique] = std::move(t);
    return unique;
  }

  void emit(Lowering& q) {
    const Node& first = *q.first;
    Node n = make_node(first.name, q.conv ? "QuantizedConv" : "QuantizedMatMul", {}, {q.output}, 1);
    n.domain = kVoltDomain;
    if (q.conv) copy_conv_geometry(first, n);
    Attribute scales;
    scales.type = Attribute::Type::Floats;
    for (double s : q.scales) scales.floats.push_back(static_cast<float>(s));
    n.attributes["volt.scales"] = scales;
    Attribute out;
    out.type = Attribute::Type::Int;
    out.i = static_cast<int64_t>(q.out);
    n.attributes["volt.output_type"] = out;
    for (const auto& [k, v] : q.activation) n.attributes[k] = v;
    if (!q.residual.empty() && (q.residual_scale != 1.0 || q.residual_zero_point != 0)) {
      Attribute scale, zero_point;
      scale.type = Attribute::Type::Float;
      scale.f = static_cast<float>(q.residual_scale);
      zero_point.type = Attribute::Type::Int;
      zero_point.i = q.residual_zero_point;
      n.attributes["volt.residual_scale"] = scale;
      n.attributes["volt.residual_zero_point"] = zero_point;
    }
    std::string bias;
    if (!q.bias.empty()) {
      Tensor b = allocate_tensor(DType::Float, {q.channels});
      for (int64_t c = 0; c < q.channels; ++c)
        b.data<float>()[c] = static_cast<float>(q.bias[static_cast<size_t>(c)]);
      bias = add_initializer(first.name + "/int8_bias", std::move(b));
    }
    const std::string w = add_initializer(first.name + "/int8_weights", std::move(q.weights));
    n.inputs = {q.x, q.x_zp, w, bias, q.multiplier, q.y_zp, q.residual};
    while (!n.inputs.empty() && n.inputs.back().empty()) n.inputs.pop_back();
    rw_.remove(q.first);
    rw_.replace(q.last, std::move(n));
  }

  // A per-tensor QuantizeLinear or DequantizeLinear with a constant scale and zero point (a
  // DequantizeLinear must name its zero point: its type is the data's).
  struct TensorParams {
    double scale;
    int64_t zero_point;
    DType type;
  };
  std::optional<TensorParams> per_tensor(const Node& n) const {
    if (n.inputs.size() < 2) return std::nullopt;
    const auto s = scales_of(g_, n.inputs[1], 1);
    if (!s) return std::nullopt;
    const bool has_zp = n.inputs.size() > 2 && !n.inputs[2].empty();
    if (!has_zp) {
      if (is_onnx_op(n, "DequantizeLinear")) return std::nullopt;
      return TensorParams{(*s)[0], 0, DType::UInt8};
    }
    const Tensor* z = constant_value(g_, n.inputs[2]);
    if (!z || z->numel() != 1 || (z->dtype() != DType::UInt8 && z->dtype() != DType::Int8))
      return std::nullopt;
    return TensorParams{(*s)[0], static_cast<int64_t>(value_at(*z, 0)), z->dtype()};
  }

  const Node* dequantize_producer(const std::string& v) const {
    const auto p = rw_.uses().producer(v);
    if (!p || rw_.removed(&g_.nodes[*p]) || !is_onnx_op(g_.nodes[*p], "DequantizeLinear"))
      return nullptr;
    return &g_.nodes[*p];
  }

  // The node that makes `v` when `reader` is its one reader, and it is still there.
  Node* sole_producer(const std::string& v, const Node& reader) {
    const auto p = rw_.uses().producer(v);
    const auto r = rw_.uses().sole_reader(v);
    if (!p || !r || *r != rw_.index(&reader) || rw_.removed(&g_.nodes[*p])) return nullptr;
    return &g_.nodes[*p];
  }

  // <prefix>scales, <prefix>zero_points (the operands', then the output's) and <prefix>output_type.
  static void set_params(Node& n, const std::string& prefix,
                         const std::vector<TensorParams>& params) {
    Attribute scales, zps, out;
    scales.type = Attribute::Type::Floats;
    zps.type = Attribute::Type::Ints;
    for (const TensorParams& t : params) {
      scales.floats.push_back(static_cast<float>(t.scale));
      zps.ints.push_back(t.zero_point);
    }
    out.type = Attribute::Type::Int;
    out.i = static_cast<int64_t>(params.back().type);
    n.attributes[prefix + "scales"] = scales;
    n.attributes[prefix + "zero_points"] = zps;
    n.attributes[prefix + "output_type"] = out;
  }

  // DequantizeLinear inputs -> Add or an activation -> QuantizeLinear: QuantizedAdd or
  // QuantizedUnary, computing on 8-bit values what the float nodes compute.
  void fuse_quantized_elementwise() {
    for (Node& q : g_.nodes) {
      if (rw_.removed(&q) || !is_onnx_op(q, "QuantizeLinear") || q.outputs.size() != 1) continue;
      const auto yq = per_tensor(q);
      if (!yq) continue;
      Node* p = sole_producer(q.inputs[0], q);
      if (!p) continue;
      Node* act = nullptr;
      std::map<std::string, Attribute> act_attrs;
      if (auto a = activation_attributes(g_, *p); !a.empty() && p->inputs[0] != q.inputs[0]) {
        act = p;
        act_attrs = std::move(a);
        // A DequantizeLinear before it may have other readers (it stays for them); an Add must not.
        const auto before = rw_.uses().producer(act->inputs[0]);
        if (!before || rw_.removed(&g_.nodes[*before])) continue;
        p = is_onnx_op(g_.nodes[*before], "DequantizeLinear") ? &g_.nodes[*before]
                                                              : sole_producer(act->inputs[0], *act);
        if (!p) continue;
      }
      std::vector<const Node*> dqs;
      if (is_onnx_op(*p, "Add") && p->inputs.size() == 2) {
        dqs = {dequantize_producer(p->inputs[0]), dequantize_producer(p->inputs[1])};
      } else if (is_onnx_op(*p, "DequantizeLinear")) {
        dqs = {p};
      } else {
        continue;
      }
      std::vector<TensorParams> params;
      for (const Node* d : dqs) {
        const auto t = d ? per_tensor(*d) : std::nullopt;
        if (!t) break;
        params.push_back(*t);
      }
      if (params.size() != dqs.size()) continue;
      params.push_back(*yq);
      if (dqs.size() == 1 && fold_into_add(*dqs[0], act, act_attrs, params, q)) continue;
      Node n =
          make_node(q.name, dqs.size() == 2 ? "QuantizedAdd" : "QuantizedUnary", {}, q.outputs, 1);
      n.domain = kVoltDomain;
      for (const Node* d : dqs) n.inputs.push_back(d->inputs[0]);
      set_params(n, "volt.", params);
      if (dqs.size() == 1) {
        Attribute in;
        in.type = Attribute::Type::Int;
        in.i = static_cast<int64_t>(params[0].type);
        n.attributes["volt.input_type"] = in;
      }
      for (auto& [k, v] : act_attrs) n.attributes[k] = v;
      if (p != dqs[0]) rw_.remove(p);  // the Add (a DequantizeLinear stays for its other readers)
      if (act) rw_.remove(act);
      rw_.replace(&q, std::move(n));
    }
  }

  // DequantizeLinear(the 8-bit sum of a QuantizedAdd made above, read only here) -> activation
  // -> QuantizeLinear: a second stage of that QuantizedAdd (volt.then_*), one pass for both.
  bool fold_into_add(const Node& dq, Node* act, const std::map<std::string, Attribute>& act_attrs,
                     const std::vector<TensorParams>& params, Node& q) {
    const auto p = rw_.uses().producer(dq.inputs[0]);
    const auto r = rw_.uses().sole_reader(dq.inputs[0]);
    if (!p || !r || *r != rw_.index(&dq) || rw_.removed(&g_.nodes[*p])) return false;
    const auto dq_reader = rw_.uses().sole_reader(dq.outputs[0]);  // the DequantizeLinear goes too
    if (!dq_reader || *dq_reader != rw_.index(act ? act : &q)) return false;
    Node& add = g_.nodes[*p];
    if (add.domain != kVoltDomain || add.op_type != "QuantizedAdd" ||
        add.has_attr("volt.then_scales"))
      return false;
    set_params(add, "volt.then_", params);
    for (const auto& [k, v] : act_attrs)  // volt.activation -> volt.then_activation, ...
      add.attributes["volt.then_" + k.substr(5)] = v;
    add.outputs = q.outputs;
    rw_.remove(&dq);
    if (act) rw_.remove(act);
    rw_.remove(&q);
    return true;
  }

  // DequantizeLinear of constants: a float constant, computed once.
  void fold_constant_dequantize() {
    for (Node& n : g_.nodes) {
      if (rw_.removed(&n) || !is_onnx_op(n, "DequantizeLinear") || n.inputs.size() < 2) continue;
      // Unread now (the layers that read it were lowered): dead-node elimination drops it.
      bool read = false;
      for (const auto& r : rw_.uses().readers(n.outputs[0])) {
        const Node& reader = g_.nodes[r.node];  // may be a lowered node now, which does not
        read = read || r.slot == ValueUses::kSubgraph ||
               (!rw_.removed(&reader) && std::find(reader.inputs.begin(), reader.inputs.end(),
                                                   n.outputs[0]) != reader.inputs.end());
      }
      if (!read || rw_.uses().is_graph_output(n.outputs[0])) continue;
      auto y = dequantized_constant(g_, n);
      if (!y) continue;
      g_.initializers[n.outputs[0]] = std::move(*y);
      rw_.remove(&n);
    }
  }

  // A float constant, or the DequantizeLinear of constants that makes `name` (an int32 bias, as
  // static quantizers store it); kept alive in `computed_`.
  const Tensor* float_constant(const std::string& name) {
    if (const Tensor* t = constant_value(g_, name)) return t;
    const auto p = rw_.uses().producer(name);
    if (!p || !is_onnx_op(g_.nodes[*p], "DequantizeLinear")) return nullptr;
    auto y = dequantized_constant(g_, g_.nodes[*p]);
    if (!y) return nullptr;
    return &(computed_[name] = std::move(*y));
  }

  PatternRewrite rw_;
  Graph& g_;
  std::map<std::string, Tensor> computed_;
};

}  // namespace

Graph lower_quantized(const Graph& graph) {
  return Lowerer(graph).run();
}

}  // namespace volt
