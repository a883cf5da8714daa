// precision = int8: quantizes a float model when the session is created, with no offline step.
// Each Conv, MatMul and Gemm with constant float weights is rewritten into the dynamically
// quantized form quantization tools write — DynamicQuantizeLinear on its input, ConvInteger or
// MatMulInteger on int8 weights (symmetric, one scale per output channel: max|w| / 127), Cast,
// Mul by (x scale · w scale), Add the bias — which lower_quantized then turns into one oneDNN
// int8 primitive, like any model quantized that way. The rest of the graph stays fp32.
#include <cmath>

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

}  // namespace

Graph quantize_at_load(const Graph& graph) {
  Graph g = graph;
  std::vector<Node> nodes;
  std::map<std::string, std::array<std::string, 3>> quantized_inputs;  // one per activation
  auto fresh = [&](const std::string& base) {
    std::string name = base;
    for (int i = 1; g.is_initializer(name); ++i) name = base + "." + std::to_string(i);
    return name;
  };
  for (const Node& n : graph.nodes) {
    const bool conv = is_onnx_op(n, "Conv"), gemm = is_onnx_op(n, "Gemm");
    const Tensor* w = n.inputs.size() > 1 ? constant_value(graph, n.inputs[1]) : nullptr;
    bool eligible = (conv || gemm || is_onnx_op(n, "MatMul")) && w && w->dtype() == DType::Float &&
                    n.outputs.size() == 1 && (conv ? w->rank() >= 3 : w->rank() == 2);
    if (gemm)
      eligible = eligible && n.attr_int("transA", 0) == 0 && n.attr_float("alpha", 1.0f) == 1.0f &&
                 n.attr_float("beta", 1.0f) == 1.0f;
    const Tensor* b =
        n.inputs.size() > 2 && !n.inputs[2].empty() ? constant_value(graph, n.inputs[2]) : nullptr;
    const int64_t channels = !eligible                                   ? 0
                             : conv || (gemm && n.attr_int("transB", 0)) ? w->shape()[0]
                                                                         : w->shape()[1];
    if (eligible && n.inputs.size() > 2 && !n.inputs[2].empty())
      eligible =
          eligible && (conv || gemm) && b && b->dtype() == DType::Float && b->numel() == channels;
    if (!eligible) {
      nodes.push_back(n);
      continue;
    }
    const std::string& x = n.inputs[0];
    if (!quantized_inputs.count(x)) {
      const std::string base = x + "/int8";
      quantized_inputs[x] = {base, base + "_scale", base + "_zero_point"};
      nodes.push_back(make_node(n.name + "/quantize_input", "DynamicQuantizeLinear", {x},
                                {base, base + "_scale", base + "_zero_point"}, 11));
    }
    const auto& [xq, xs, xz] = quantized_inputs[x];
    QuantizedWeights qw = quantize_weights(*w, conv, gemm && n.attr_int("transB", 0) != 0);
    const std::string wn = fresh(n.name + "/int8_weights"), sn = fresh(n.name + "/int8_scales");
    g.initializers[wn] = std::move(qw.q);
    g.initializers[sn] = std::move(qw.scales);
    const std::string acc = n.outputs[0] + "/int8_acc";
    Node integer =
        make_node(n.name, conv ? "ConvInteger" : "MatMulInteger", {xq, wn, xz}, {acc}, 10);
    if (conv)
      for (const char* a : {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"})
        if (n.attributes.count(a)) integer.attributes[a] = n.attributes.at(a);
    nodes.push_back(std::move(integer));
    nodes.push_back(cast_node(acc, acc + "_float", DType::Float));
    nodes.push_back(make_node(n.name + "/scale", "Mul", {xs, sn}, {acc + "_scale"}, 13));
    const std::string scaled = b ? acc + "_scaled" : n.outputs[0];
    nodes.push_back(
        make_node(n.name + "/rescale", "Mul", {acc + "_float", acc + "_scale"}, {scaled}, 13));
    if (b) {
      Tensor bias = *b;
      if (conv) {  // broadcast over the channel axis
        Shape s(w->rank(), 1);
        s[1] = channels;
        bias = allocate_tensor(DType::Float, s);
        std::copy(b->data<float>(), b->data<float>() + channels, bias.data<float>());
      }
      const std::string bn = fresh(n.name + "/int8_bias");
      g.initializers[bn] = std::move(bias);
      nodes.push_back(make_node(n.name + "/bias", "Add", {scaled, bn}, {n.outputs[0]}, 13));
    }
  }
  g.nodes = std::move(nodes);
  return g;
}

}  // namespace volt
