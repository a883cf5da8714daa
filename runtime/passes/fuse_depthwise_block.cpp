// A channels-last depthwise convolution, with the 1×1 convolution that feeds it (MobileNetV2's
// expansion) and the one that reads it (the projection, with its fused residual sum), becomes one
// ai.volt DepthwiseBlock node, which keeps the wide tensors between them out of memory
// (operators/cpu/depthwise_block.cpp). Either 1×1 may be missing, not both.
//
// The 1×1 convolutions: stride 1, no padding, one group, constant fp32 weights (and bias), any
// fused activation, their value read by the depthwise convolution alone (the expansion) or the
// depthwise convolution's value read by them alone (the projection); the expansion without a
// residual and reading a channels-last X. The depthwise convolution: one group per channel,
// constant fp32 weights, no dilation, no residual, any fused activation. All already channels-
// last (after use_channels_last) and left in fp32 (not for bf16 precision).
//
// With neither 1×1, a depthwise convolution whose activation volt applies itself
// (own_activation.hpp: EfficientNet's Swish) becomes a block too: the kernel runs it in strips
// and applies the activation to each strip's rows while they are in cache, where oneDNN's
// post-op cost more than the convolution.
#include "operators/common/own_activation.hpp"
#include "operators/registry.hpp"
#include "runtime/passes/passes.hpp"

namespace volt {
namespace {

// The channels of depthwise convolution `n`, or 0 when it is not one.
int64_t depthwise_channels(const Graph& g, const Node& n) {
  if (!nhwc_conv_with_constant_weights(g, n, false)) return 0;
  const Shape& w = constant_float_input(g, n, 1, 4)->shape();
  const bool depthwise = w[1] == 1 && n.attr_int("group", 1) == w[0] && w[0] > 1 &&
                         all_of_ints(n.attr_ints("dilations"), 1);
  return depthwise ? w[0] : 0;
}

void copy_activation(const Node& from, const std::string& prefix, Node& to) {
  for (const char* key : {"activation", "alpha", "beta"}) {
    auto a = from.attributes.find(std::string("volt.") + key);
    if (a != from.attributes.end()) to.attributes[prefix + key] = a->second;
  }
}

}  // namespace

Graph fuse_depthwise_block(const Graph& graph) {
  PatternRewrite rw(graph);
  Graph& g = rw.graph();
  const ValueUses& uses = rw.uses();
  for (const Node& dw : g.nodes) {
    if (rw.removed(&dw)) continue;
    const int64_t channels = depthwise_channels(g, dw);
    if (channels == 0) continue;
    const Node* expand = nullptr;
    if (auto p = uses.producer(dw.inputs[0]); p && uses.sole_reader(dw.inputs[0])) {
      const Node& e = g.nodes[*p];
      const Tensor* w = constant_float_input(g, e, 1, 4);
      if (!rw.removed(&e) && w && w->shape()[0] == channels &&
          nhwc_pointwise_conv(g, e, w->shape()[1], false))
        expand = &e;
    }
    const Node* project = rw.sole_reader(dw.outputs[0], "Conv");
    if (project &&
        (project->inputs[0] != dw.outputs[0] || !nhwc_pointwise_conv(g, *project, channels, true)))
      project = nullptr;
    if (!expand && !project && !has_own_activation(FusedActivation::of(dw))) continue;
    auto input = [](const Node* n, size_t i) { return n && n->has_input(i) ? n->inputs[i] : ""; };
    std::vector<std::string> inputs = {expand ? expand->inputs[0] : dw.inputs[0],
                                       input(expand, 1),
                                       input(expand, 2),
                                       dw.inputs[1],
                                       input(&dw, 2),
                                       input(project, 1),
                                       input(project, 2),
                                       input(project, 3)};
    while (inputs.back().empty()) inputs.pop_back();
    std::string name = dw.name;
    if (expand) name = expand->name + "+" + name;
    if (project) name += "+" + project->name;
    const Node& last = project ? *project : dw;
    Node fused = make_node(name, "DepthwiseBlock", inputs, {last.outputs[0]}, 1);
    fused.domain = kVoltDomain;
    for (const auto& [key, value] : dw.attributes)
      if (key != "group" && key != "volt.layout") fused.attributes[key] = value;
    if (expand) copy_activation(*expand, "volt.expand_", fused);
    if (project) copy_activation(*project, "volt.project_", fused);
    if (expand) rw.remove(expand);
    if (project) rw.remove(&dw);
    // At the last node's place: X exists before the first, the residual before the projection,
    // and Y's readers come after.
    rw.replace(&last, std::move(fused));
  }
  return rw.finish();
}

}  // namespace volt
