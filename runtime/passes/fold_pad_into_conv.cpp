// Pad -> Conv becomes one Conv with the padding added to its own: converters from frameworks
// with "same" padding of their own (TensorFlow, Keras, some torch exports) write an explicit
// Pad before convolutions, a full copy of the activation each time. Only zero padding
// (constant mode, value 0) of the spatial axes by constant, non-negative amounts, where the
// Conv is the padded value's only reader and pads explicitly (auto_pad NOTSET or VALID).
#include "runtime/passes/passes.hpp"

namespace volt {
namespace {

// The per-axis pads of `pad` ([begin..., end...] over every axis) when it is zero padding by
// constant amounts; empty otherwise.
std::vector<int64_t> zero_padding(const Graph& g, const Node& pad) {
  if (pad.attr_string("mode", "constant") != "constant") return {};
  std::vector<int64_t> pads;
  if (pad.opset < 11) {
    if (pad.attr_float("value", 0.0f) != 0.0f) return {};
    pads = pad.attr_ints("pads");
  } else {
    if (pad.inputs.size() < 2 || pad.inputs[1].empty()) return {};
    if (pad.inputs.size() > 3 && !pad.inputs[3].empty()) return {};  // axes (opset 18)
    const Tensor* p = constant_value(g, pad.inputs[1]);
    if (!p || p->dtype() != DType::Int64) return {};
    pads.assign(p->data<int64_t>(), p->data<int64_t>() + p->numel());
    if (pad.inputs.size() > 2 && !pad.inputs[2].empty()) {
      const auto v = constant_scalar(g, pad.inputs[2]);
      if (!v || *v != 0.0f) return {};
    }
  }
  for (int64_t v : pads)
    if (v < 0) return {};  // cropping
  return pads;
}

}  // namespace

Graph fold_pad_into_conv(const Graph& graph) {
  PatternRewrite rw(graph);
  Graph& g = rw.graph();
  for (Node& pad : g.nodes) {
    if (!is_onnx_op(pad, "Pad") || pad.outputs.size() != 1 || rw.removed(&pad)) continue;
    Node* conv = rw.sole_reader(pad.outputs[0], "Conv");
    if (!conv || conv->inputs.empty() || conv->inputs[0] != pad.outputs[0]) continue;
    const std::string auto_pad = conv->attr_string("auto_pad", "NOTSET");
    if (auto_pad != "NOTSET" && auto_pad != "VALID") continue;
    const std::vector<int64_t> pads = zero_padding(graph, pad);
    const size_t rank = pads.size() / 2;
    if (pads.size() % 2 || rank < 3) continue;
    // Nothing on the batch and channel axes.
    if (pads[0] || pads[1] || pads[rank] || pads[rank + 1]) continue;
    const size_t spatial = rank - 2;
    std::vector<int64_t> own =
        auto_pad == "VALID" ? std::vector<int64_t>{} : conv->attr_ints("pads");
    if (own.empty()) own.assign(2 * spatial, 0);
    if (own.size() != 2 * spatial) continue;  // the kernel reports the malformed attribute
    for (size_t i = 0; i < spatial; ++i) {
      own[i] += pads[2 + i];
      own[spatial + i] += pads[rank + 2 + i];
    }
    Attribute a;
    a.type = Attribute::Type::Ints;
    a.ints = own;
    conv->attributes["pads"] = a;
    conv->attributes.erase("auto_pad");
    conv->inputs[0] = pad.inputs[0];
    rw.remove(&pad);
  }
  return rw.finish();
}

}  // namespace volt
