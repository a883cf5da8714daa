// precision = int8: quantizes a float model when the session is created, with no offline step.
// Without calibration (quantize_at_load):
// Each Conv, MatMul and Gemm with constant float weights is rewritten into the dynamically
// quantized form quantization tools write — DynamicQuantizeLinear on its input, ConvInteger or
// MatMulInteger on int8 weights (symmetric, one scale per output channel: max|w| / 127), Cast,
// Mul by (x scale · w scale), Add the bias — which lower_quantized then turns into one oneDNN
// int8 primitive, like any model quantized that way. With a calibration batch (quantize_static,
// ranges measured by runtime/calibration.cpp) the layers get the QDQ form with fixed scales, so
// they chain in 8 bits with no quantizer pass between them. The rest of the graph stays fp32.
#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "runtime/passes/passes.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

struct QuantizedWeights {
  Tensor q;       // int8, in the layout the integer op reads (Conv's, or MatMul's [K, N])
  Tensor scales;  // float, shaped to broadcast over the output's channel axis
};

// `w` is [M, ...] with channels on axis 0 (Conv) or [K, N] with channels on axis 1 (MatMul;
// Gemm's transB [N, K] is transposed here).
QuantizedWeights quantize_weights(const Tensor& w, bool conv, bool transposed) {
  const int64_t rows = w.shape()[0], cols = w.numel() / std::max<int64_t>(rows, 1);
  const int64_t channels = conv || transposed ? rows : cols;
  const float* pw = w.data<float>();
  std::vector<float> amax(static_cast<size_t>(channels), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float& a = amax[static_cast<size_t>(conv || transposed ? r : c)];
      a = std::max(a, std::abs(pw[r * cols + c]));
    }
  QuantizedWeights out;
  Shape scale_shape = {channels};
  if (conv) {
    scale_shape = Shape(w.rank(), 1);
    scale_shape[1] = channels;
  }
  out.scales = allocate_tensor(DType::Float, scale_shape);
  for (int64_t c = 0; c < channels; ++c) {
    const float a = amax[static_cast<size_t>(c)];
    out.scales.data<float>()[c] = a > 0 && std::isfinite(a) ? a / 127.0f : 1.0f;
  }
  out.q = allocate_tensor(DType::Int8, transposed ? Shape{cols, rows} : w.shape());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t ch = conv || transposed ? r : c;
      const float v = std::nearbyint(pw[r * cols + c] / out.scales.data<float>()[ch]);
      out.q.data<int8_t>()[transposed ? c * rows + r : r * cols + c] =
          static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
    }
  return out;
}

// A Conv, MatMul or Gemm that precision=int8 quantizes: constant float weights (and bias).
struct Layer {
  bool conv = false, gemm = false, transposed = false;
  const Tensor* w = nullptr;
  const Tensor* b = nullptr;
  int64_t channels = 0;
};

// A constant, also behind Identity nodes (exporters route shared weights through them; the
// calibrated path runs before remove_identities).
const Tensor* constant_behind_identities(const Graph& graph, const std::string& name) {
  std::string v = name;
  for (int hops = 0; hops < 16; ++hops) {
    if (const Tensor* t = constant_value(graph, v)) return t;
    const auto it = std::find_if(graph.nodes.begin(), graph.nodes.end(), [&](const Node& n) {
      return is_onnx_op(n, "Identity") && n.outputs.size() == 1 && n.outputs[0] == v;
    });
    if (it == graph.nodes.end() || it->inputs.empty()) return nullptr;
    v = it->inputs[0];
  }
  return nullptr;
}

std::optional<Layer> quantizable(const Graph& graph, const Node& n) {
  Layer l;
  l.conv = is_onnx_op(n, "Conv");
  l.gemm = is_onnx_op(n, "Gemm");
  if (!l.conv && !l.gemm && !is_onnx_op(n, "MatMul")) return std::nullopt;
  l.w = n.inputs.size() > 1 ? constant_behind_identities(graph, n.inputs[1]) : nullptr;
  if (!l.w || l.w->dtype() != DType::Float || n.outputs.size() != 1 || n.inputs[0].empty() ||
      (l.conv ? l.w->rank() < 3 : l.w->rank() != 2))
    return std::nullopt;
  if (l.gemm && (n.attr_int("transA", 0) != 0 || n.attr_float("alpha", 1.0f) != 1.0f ||
                 n.attr_float("beta", 1.0f) != 1.0f))
    return std::nullopt;
  l.transposed = l.gemm && n.attr_int("transB", 0) != 0;
  l.channels = l.conv || l.transposed ? l.w->shape()[0] : l.w->shape()[1];
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    l.b = constant_behind_identities(graph, n.inputs[2]);
    if (!(l.conv || l.gemm) || !l.b || l.b->dtype() != DType::Float || l.b->numel() != l.channels)
      return std::nullopt;
  }
  return l;
}

class LayerQuantizer {
 public:
  LayerQuantizer(const Graph& graph, const std::map<std::string, ActivationRange>* ranges)
      : graph_(graph), g_(graph), ranges_(ranges) {}

  Graph run() {
    for (const Node& n : graph_.nodes) {
      const auto layer = quantizable(graph_, n);
      if (!layer) {
        nodes_.push_back(n);
        if (ranges_) read_shortcut_quantized(nodes_.back());
        continue;
      }
      const auto range = ranges_ ? ranges_->find(n.inputs[0])
                                 : std::map<std::string, ActivationRange>::const_iterator{};
      if (ranges_ && range != ranges_->end())
        static_layer(n, *layer, range->second);
      else
        dynamic_layer(n, *layer);
    }
    g_.nodes = std::move(nodes_);
    return std::move(g_);
  }

 private:
  std::string fresh(const std::string& base) const {
    std::string name = base;
    for (int i = 1; g_.is_initializer(name); ++i) name = base + "." + std::to_string(i);
    return name;
  }
  std::string add(const std::string& base, Tensor t) {
    const std::string name = fresh(base);
    g_.initializers[name] = std::move(t);
    return name;
  }

  // DynamicQuantizeLinear, ConvInteger / MatMulInteger, Cast, Mul by the scales, Add the bias.
  void dynamic_layer(const Node& n, const Layer& l) {
    const std::string& x = n.inputs[0];
    if (!dynamic_.count(x)) {
      const std::string base = x + "/int8";
      dynamic_[x] = {base, base + "_scale", base + "_zero_point"};
      nodes_.push_back(make_node(n.name + "/quantize_input", "DynamicQuantizeLinear", {x},
                                 {base, base + "_scale", base + "_zero_point"}, 11));
    }
    const auto& [xq, xs, xz] = dynamic_[x];
    QuantizedWeights qw = quantize_weights(*l.w, l.conv, l.transposed);
    const std::string wn = add(n.name + "/int8_weights", std::move(qw.q));
    const std::string sn = add(n.name + "/int8_scales", std::move(qw.scales));
    const std::string acc = n.outputs[0] + "/int8_acc";
    Node integer =
        make_node(n.name, l.conv ? "ConvInteger" : "MatMulInteger", {xq, wn, xz}, {acc}, 10);
    if (l.conv) copy_conv_geometry(n, integer);
    nodes_.push_back(std::move(integer));
    nodes_.push_back(cast_node(acc, acc + "_float", DType::Float));
    nodes_.push_back(make_node(n.name + "/scale", "Mul", {xs, sn}, {acc + "_scale"}, 13));
    const std::string scaled = l.b ? acc + "_scaled" : n.outputs[0];
    nodes_.push_back(
        make_node(n.name + "/rescale", "Mul", {acc + "_float", acc + "_scale"}, {scaled}, 13));
    if (l.b) {
      Tensor bias = *l.b;
      if (l.conv) {  // broadcast over the channel axis
        Shape shape(l.w->rank(), 1);
        shape[1] = l.channels;
        bias = allocate_tensor(DType::Float, shape);
        std::copy(l.b->data<float>(), l.b->data<float>() + l.channels, bias.data<float>());
      }
      const std::string bn = add(n.name + "/int8_bias", std::move(bias));
      nodes_.push_back(make_node(n.name + "/bias", "Add", {scaled, bn}, {n.outputs[0]}, 13));
    }
  }

  // x through QuantizeLinear / DequantizeLinear with the calibrated uint8 scale, once; returns
  // the dequantized value.
  std::string fixed_quantizer(const std::string& x, const ActivationRange& r,
                              const std::string& node_name) {
    if (!fixed_.count(x)) {
      const float lo = std::min(r.lo, 0.0f), hi = std::max(r.hi, 0.0f);
      const float scale = hi > lo && std::isfinite(hi - lo) ? (hi - lo) / 255.0f : 1.0f;
      Tensor s = allocate_tensor(DType::Float, {}), z = allocate_tensor(DType::UInt8, {});
      s.data<float>()[0] = scale;
      z.data<uint8_t>()[0] =
          static_cast<uint8_t>(std::clamp(std::nearbyint(-lo / scale), 0.0f, 255.0f));
      const std::string sn = add(x + "/int8_scale", std::move(s)),
                        zn = add(x + "/int8_zero_point", std::move(z));
      nodes_.push_back(make_node(node_name + "/quantize_input", "QuantizeLinear", {x, sn, zn},
                                 {x + "/int8_fixed"}, 13));
      nodes_.push_back(make_node(node_name + "/dequantize_input", "DequantizeLinear",
                                 {x + "/int8_fixed", sn, zn}, {x + "/int8_dequantized"}, 13));
      fixed_.insert(x);
    }
    return x + "/int8_dequantized";
  }

  // An Add of a quantized convolution's output and a value that quantized layers also read (a
  // ResNet block's shortcut) reads that value's 8-bit form, as static quantizers write it: the
  // convolution then takes the 8-bit shortcut and writes the block's 8-bit output for the next
  // block, instead of float values and a quantizer pass between blocks.
  void read_shortcut_quantized(Node& add) {
    if (!is_onnx_op(add, "Add") || add.inputs.size() != 2) return;
    for (size_t i = 0; i < 2; ++i) {
      const std::string& other = add.inputs[1 - i];
      const auto range = ranges_->find(add.inputs[i]);
      if (!static_conv_outputs_.count(other) || range == ranges_->end() ||
          static_conv_outputs_.count(add.inputs[i]))
        continue;
      // The quantizer goes before the Add, after whatever made its input.
      Node moved = std::move(add);
      nodes_.pop_back();
      moved.inputs[i] = fixed_quantizer(moved.inputs[i], range->second, moved.name);
      nodes_.push_back(std::move(moved));
      return;
    }
  }

  // The QDQ form static quantizers write: x through QuantizeLinear / DequantizeLinear with the
  // calibrated uint8 scale, weights through DequantizeLinear per output channel, the float op
  // between them; lower_quantized makes one 8-bit layer of it, chained to the next.
  void static_layer(const Node& n, const Layer& l, const ActivationRange& r) {
    const std::string x = fixed_quantizer(n.inputs[0], r, n.name);
    QuantizedWeights qw = quantize_weights(*l.w, l.conv, l.transposed);
    Tensor scales = allocate_tensor(DType::Float, {l.channels});  // 1-D, per axis
    std::copy(qw.scales.data<float>(), qw.scales.data<float>() + l.channels, scales.data<float>());
    const std::string wn = add(n.name + "/int8_weights", std::move(qw.q));
    const std::string sn = add(n.name + "/int8_scales", std::move(scales));
    Node dq = make_node(n.name + "/dequantize_weights", "DequantizeLinear", {wn, sn},
                        {wn + "_dequantized"}, 13);
    Attribute axis;
    axis.type = Attribute::Type::Int;
    axis.i = l.conv ? 0 : 1;
    dq.attributes["axis"] = axis;
    nodes_.push_back(std::move(dq));
    std::vector<std::string> ins = {x, wn + "_dequantized"};
    if (l.b)
      ins.push_back(add(n.name + "/bias", *l.b));  // (the original may be behind an Identity)
    Node op = make_node(n.name, l.conv ? "Conv" : l.gemm ? "Gemm" : "MatMul", ins, n.outputs, 13);
    if (l.conv) copy_conv_geometry(n, op);  // a Gemm's weights are [K, N] now: no transB
    if (l.conv) static_conv_outputs_.insert(n.outputs[0]);
    nodes_.push_back(std::move(op));
  }

  const Graph& graph_;
  Graph g_;
  const std::map<std::string, ActivationRange>* ranges_;
  std::vector<Node> nodes_;
  std::map<std::string, std::array<std::string, 3>> dynamic_;  // one quantizer per activation
  std::set<std::string> fixed_;
  std::set<std::string> static_conv_outputs_;
};

}  // namespace

std::vector<std::string> quantizable_inputs(const Graph& graph) {
  std::vector<std::string> names;
  for (const Node& n : graph.nodes)
    if (quantizable(graph, n) && std::find(names.begin(), names.end(), n.inputs[0]) == names.end())
      names.push_back(n.inputs[0]);
  return names;
}

Graph quantize_at_load(const Graph& graph) {
  return LayerQuantizer(graph, nullptr).run();
}

Graph quantize_static(const Graph& graph, const std::map<std::string, ActivationRange>& ranges) {
  return LayerQuantizer(graph, &ranges).run();
}

}  // namespace volt
