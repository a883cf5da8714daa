// Mul(X, S) -> 1×1 Conv, where S holds one scale per image and channel, becomes one ai.volt
// ScaledPointwiseConv (operators/cpu/scaled_pointwise_conv.cpp), which puts the scale into the
// convolution's weights instead of writing the scaled X out: the squeeze-and-excitation gate and
// the projection after it in EfficientNet, MobileNetV3 and RegNetY blocks.
//
// S is known to be [N, 1, 1, C] by how it is made, as passes see no shapes: a chain from a
// GlobalAveragePool (the squeeze) through 1×1 convolutions and elementwise activations (the
// excitation), whose last convolution has the Conv's input channels as outputs. The Mul and
// everything around it are in the channels-last region (after use_channels_last), the Conv a
// plain 1×1 one (nhwc_pointwise_conv) with any residual and activation, the Mul's value read by
// the Conv alone.
#include "operators/registry.hpp"
#include "runtime/passes/passes.hpp"

namespace volt {
namespace {

// Elementwise activations the excitation may apply between its convolutions (when
// fuse_conv_activation did not take them in).
bool is_unary_activation(const Node& n) {
  static const char* const kOps[] = {"Relu",      "Sigmoid", "HardSigmoid", "Clip",
                                     "HardSwish", "Tanh",    "LeakyRelu"};
  for (const char* op : kOps)
    if (is_onnx_op(n, op)) return !n.inputs.empty() && n.outputs.size() == 1;
  return false;
}

// Whether `s` is a scale per image and channel with `channels` channels: made from a
// GlobalAveragePool by 1×1 convolutions (the last with `channels` outputs) and activations.
bool is_channel_scale(const Graph& g, const ValueUses& uses, const std::string& s,
                      int64_t channels) {
  int64_t out_channels = -1;  // of the last convolution on the way back
  std::string v = s;
  for (int step = 0; step < 8; ++step) {
    auto p = uses.producer(v);
    if (!p) return false;
    const Node& n = g.nodes[*p];
    if (is_onnx_op(n, "GlobalAveragePool"))
      return out_channels == channels && n.attr_string("volt.layout", "") == "NHWC";
    if (is_onnx_op(n, "Conv")) {
      const Tensor* w = constant_float_input(g, n, 1, 4);
      if (!w || w->shape()[2] != 1 || w->shape()[3] != 1 ||
          n.attr_string("volt.layout", "") != "NHWC" || !all_of_ints(n.attr_ints("strides"), 1) ||
          !all_of_ints(n.attr_ints("pads"), 0) || n.inputs.size() > 3)
        return false;
      if (out_channels < 0) out_channels = w->shape()[0];
    } else if (!is_unary_activation(n)) {
      return false;
    }
    v = n.inputs[0];
  }
  return false;
}

}  // namespace

Graph fold_channel_scale_into_conv(const Graph& graph) {
  PatternRewrite rw(graph);
  Graph& g = rw.graph();
  const ValueUses& uses = rw.uses();
  for (const Node& mul : g.nodes) {
    if (rw.removed(&mul) || !is_onnx_op(mul, "Mul") || mul.inputs.size() != 2 ||
        mul.outputs.size() != 1 || !is_channels_last_value(mul.outputs[0]))
      continue;
    Node* conv = rw.sole_reader(mul.outputs[0], "Conv");
    if (!conv || conv->inputs[0] != mul.outputs[0]) continue;
    const Tensor* w = constant_float_input(g, *conv, 1, 4);
    if (!w || !nhwc_pointwise_conv(g, *conv, w->shape()[1], true)) continue;
    const int64_t channels = w->shape()[1];
    int scale = -1;
    for (int i : {1, 0})
      if (is_channels_last_value(mul.inputs[static_cast<size_t>(i)]) &&
          is_channel_scale(g, uses, mul.inputs[static_cast<size_t>(i)], channels))
        scale = i;
    if (scale < 0 || !is_channels_last_value(mul.inputs[static_cast<size_t>(1 - scale)])) continue;
    auto input = [&](size_t i) { return conv->has_input(i) ? conv->inputs[i] : std::string(); };
    std::vector<std::string> inputs = {mul.inputs[static_cast<size_t>(1 - scale)],
                                       mul.inputs[static_cast<size_t>(scale)], conv->inputs[1],
                                       input(2), input(3)};
    while (inputs.back().empty()) inputs.pop_back();
    Node fused =
        make_node(mul.name + "+" + conv->name, "ScaledPointwiseConv", inputs, conv->outputs, 1);
    fused.domain = kVoltDomain;
    for (const char* key : {"volt.activation", "volt.alpha", "volt.beta"}) {
      auto a = conv->attributes.find(key);
      if (a != conv->attributes.end()) fused.attributes[key] = a->second;
    }
    rw.remove(&mul);
    // At the Conv's place: X and S exist before the Mul, the residual before the Conv.
    rw.replace(conv, std::move(fused));
  }
  return rw.finish();
}

}  // namespace volt
