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

// Pad -> AveragePool / MaxPool (see above); false where it does not apply.
bool fold_into_pool(const Graph& graph, PatternRewrite& rw, Node& pad) {
  Node* pool = rw.sole_reader(pad.outputs[0], "AveragePool");
  if (!pool) pool = rw.sole_reader(pad.outputs[0], "MaxPool");
  if (!pool || pool->inputs.empty() || pool->inputs[0] != pad.outputs[0] ||
      pool->outputs.size() != 1)
    return false;
  const std::string auto_pad = pool->attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID") return false;
  for (int64_t v : pool->attr_ints("pads", {}))
    if (v != 0) return false;
  const std::vector<int64_t> pads = zero_padding(graph, pad);
  const size_t rank = pads.size() / 2;
  if (pads.empty() || pads.size() % 2 || rank < 3) return false;
  if (pads[0] || pads[1] || pads[rank] || pads[rank + 1]) return false;
  const bool adds_nothing = std::all_of(pads.begin(), pads.end(), [](int64_t v) { return v == 0; });
  if (!adds_nothing) {
    if (pool->op_type != "AveragePool" || pool->attr_int("ceil_mode", 0) != 0) return false;
    std::vector<int64_t> own;
    for (size_t i = 2; i < rank; ++i) own.push_back(pads[i]);
    for (size_t i = 2; i < rank; ++i) own.push_back(pads[rank + i]);
    Attribute a;
    a.type = Attribute::Type::Ints;
    a.ints = own;
    pool->attributes["pads"] = a;
    pool->attributes.erase("auto_pad");
    Attribute include;
    include.type = Attribute::Type::Int;
    include.i = 1;
    pool->attributes["count_include_pad"] = include;
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
