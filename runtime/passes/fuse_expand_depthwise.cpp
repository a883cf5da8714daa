// A channels-last 1×1 convolution whose only reader is a depthwise convolution (MobileNetV2's
// expansion and the 3×3 filter after it) becomes one ai.volt ExpandDepthwise node, which never
// writes the widened tensor to memory (operators/cpu/expand_depthwise.cpp).
//
// The 1×1: stride 1, no padding, one group, constant fp32 weights (and bias), any fused
// activation, no fused residual, X channels-last too. The depthwise convolution: one group per
// channel, constant fp32 weights, no dilation, no residual, any fused activation. Both already
// channels-last (after use_channels_last) and left in fp32 (not for bf16 precision).
#include "operators/registry.hpp"
#include "runtime/passes/passes.hpp"

namespace volt {
namespace {

const Tensor* float_constant(const Graph& g, const Node& n, size_t slot, size_t rank) {
  if (!n.has_input(slot)) return nullptr;
  const Tensor* t = constant_value(g, n.inputs[slot]);
  return t && t->dtype() == DType::Float && t->rank() == rank ? t : nullptr;
}

bool all_equal(const std::vector<int64_t>& v, int64_t want) {
  return std::all_of(v.begin(), v.end(), [&](int64_t x) { return x == want; });
}

// A Conv in the channels-last region with constant fp32 weights (and bias, if any) and no
// residual or bf16 arithmetic.
bool plain_nhwc_conv(const Graph& g, const Node& n) {
  return is_onnx_op(n, "Conv") && n.attr_string("volt.layout", "") == "NHWC" &&
         !n.has_attr("volt.compute") && n.inputs.size() <= 3 && n.outputs.size() == 1 &&
         float_constant(g, n, 1, 4) && (!n.has_input(2) || float_constant(g, n, 2, 1));
}

bool is_expansion(const Graph& g, const Node& n) {
  if (!plain_nhwc_conv(g, n)) return false;
  const Shape& w = float_constant(g, n, 1, 4)->shape();
  const std::string pad = n.attr_string("auto_pad", "NOTSET");
  return w[2] == 1 && w[3] == 1 && n.attr_int("group", 1) == 1 &&
         !n.has_attr("volt.input_layout") &&  // X channels-first: the network's first Conv
         all_equal(n.attr_ints("strides"), 1) && all_equal(n.attr_ints("pads"), 0) &&
         (pad == "NOTSET" || pad == "VALID");
}

bool is_depthwise(const Graph& g, const Node& n, int64_t channels) {
  if (!plain_nhwc_conv(g, n)) return false;
  const Shape& w = float_constant(g, n, 1, 4)->shape();
  return w[0] == channels && w[1] == 1 && n.attr_int("group", 1) == channels &&
         all_equal(n.attr_ints("dilations"), 1);
}

}  // namespace

Graph fuse_expand_depthwise(const Graph& graph) {
  PatternRewrite rw(graph);
  Graph& g = rw.graph();
  for (const Node& expand : g.nodes) {
    if (rw.removed(&expand) || !is_expansion(g, expand)) continue;
    const Node* dw = rw.sole_reader(expand.outputs[0], "Conv");
    const int64_t channels = float_constant(g, expand, 1, 4)->shape()[0];
    if (!dw || dw->inputs[0] != expand.outputs[0] || !is_depthwise(g, *dw, channels)) continue;
    Node fused =
        make_node(expand.name + "+" + dw->name, "ExpandDepthwise",
                  {expand.inputs[0], expand.inputs[1], expand.has_input(2) ? expand.inputs[2] : "",
                   dw->inputs[1], dw->has_input(2) ? dw->inputs[2] : ""},
                  {dw->outputs[0]}, 1);
    fused.domain = kVoltDomain;
    for (const auto& [key, value] : dw->attributes)
      if (key != "group" && key != "volt.layout") fused.attributes[key] = value;
    for (const char* key : {"activation", "alpha", "beta"}) {
      auto a = expand.attributes.find(std::string("volt.") + key);
      if (a != expand.attributes.end())
        fused.attributes[std::string("volt.expand_") + key] = a->second;
    }
    rw.remove(&expand);
    rw.remove(dw);
    rw.replace(dw, std::move(fused));  // X exists before the expansion; Y's readers come after
  }
  return rw.finish();
}

}  // namespace volt
