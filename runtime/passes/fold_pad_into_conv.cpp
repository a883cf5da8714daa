// Pad -> Conv becomes one Conv with the padding added to its own: converters from frameworks
// with "same" padding of their own (TensorFlow, Keras, some torch exports) write an explicit
// Pad before convolutions, a full copy of the activation each time. Only zero padding
// (constant mode, value 0) of the spatial axes by constant, non-negative amounts, where the
// Conv is the padded value's only reader and pads explicitly (auto_pad NOTSET or VALID).
//
// Pad -> AveragePool likewise, where the pool pads nothing itself: the padded zeros are
// averaged in, which is count_include_pad = 1 over the same pads, window for window when no
// window reaches past the padded input (ceil_mode 0). Pad -> MaxPool only where the Pad adds
// nothing (torch exports average and max pools at opset 11+ with a Pad of zeros before them:
// DenseNet's transitions): the padding would be -inf for a max. Besides the copy, the Pad kept
// the pool and every value after it out of the channels-last region.
#include <algorithm>
#include <optional>

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

// zero_padding's pads when they are of the spatial axes only (N, C, spatial...), as a Conv's or
// pool's own `pads` attribute writes them: [begin per spatial axis..., end per spatial axis...].
std::optional<std::vector<int64_t>> spatial_zero_padding(const Graph& g, const Node& pad) {
  const std::vector<int64_t> pads = zero_padding(g, pad);
  const size_t rank = pads.size() / 2;
  if (pads.empty() || pads.size() % 2 || rank < 3) return std::nullopt;
  if (pads[0] || pads[1] || pads[rank] || pads[rank + 1]) return std::nullopt;
  std::vector<int64_t> spatial(pads.begin() + 2, pads.begin() + static_cast<int64_t>(rank));
  spatial.insert(spatial.end(), pads.begin() + static_cast<int64_t>(rank) + 2, pads.end());
  return spatial;
}

// Whether `n` pads by its attribute (auto_pad NOTSET or VALID), which a fold can add to.
bool pads_explicitly(const Node& n) {
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  return auto_pad == "NOTSET" || auto_pad == "VALID";
}

// Pad -> AveragePool / MaxPool (see above); false where it does not apply.
bool fold_into_pool(const Graph& graph, PatternRewrite& rw, Node& pad) {
  Node* pool = rw.sole_reader(pad.outputs[0], "AveragePool");
  if (!pool) pool = rw.sole_reader(pad.outputs[0], "MaxPool");
  if (!pool || pool->inputs.empty() || pool->inputs[0] != pad.outputs[0] ||
      pool->outputs.size() != 1 || !pads_explicitly(*pool))
    return false;
  for (int64_t v : pool->attr_ints("pads", {}))
    if (v != 0) return false;
  const auto pads = spatial_zero_padding(graph, pad);
  if (!pads) return false;
  if (std::any_of(pads->begin(), pads->end(), [](int64_t v) { return v != 0; })) {
    if (pool->op_type != "AveragePool" || pool->attr_int("ceil_mode", 0) != 0) return false;
    pool->attributes["pads"] = ints_attr(*pads);
    pool->attributes.erase("auto_pad");
    pool->attributes["count_include_pad"] = int_attr(1);
  }
  pool->inputs[0] = pad.inputs[0];
  rw.remove(&pad);
  return true;
}

}  // namespace

Graph fold_pad_into_conv(const Graph& graph) {
  PatternRewrite rw(graph);
  Graph& g = rw.graph();
  for (Node& pad : g.nodes) {
    if (!is_onnx_op(pad, "Pad") || pad.outputs.size() != 1 || rw.removed(&pad)) continue;
    if (fold_into_pool(graph, rw, pad)) continue;
    Node* conv = rw.sole_reader(pad.outputs[0], "Conv");
    if (!conv || conv->inputs.empty() || conv->inputs[0] != pad.outputs[0] ||
        !pads_explicitly(*conv))
      continue;
    const auto pads = spatial_zero_padding(graph, pad);
    if (!pads) continue;
    std::vector<int64_t> own = conv->attr_string("auto_pad", "NOTSET") == "VALID"
                                   ? std::vector<int64_t>{}
                                   : conv->attr_ints("pads");
    if (own.empty()) own.assign(pads->size(), 0);
    if (own.size() != pads->size()) continue;  // the kernel reports the malformed attribute
    for (size_t i = 0; i < own.size(); ++i) own[i] += (*pads)[i];
    conv->attributes["pads"] = ints_attr(own);
    conv->attributes.erase("auto_pad");
    conv->inputs[0] = pad.inputs[0];
    rw.remove(&pad);
  }
  return rw.finish();
}

}  // namespace volt
