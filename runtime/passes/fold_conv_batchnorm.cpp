// Conv -> BatchNormalization (inference form, all statistics constant) becomes one Conv whose
// weights and bias absorb the normalization:
//   s = scale / sqrt(var + epsilon);  W'[m] = W[m] * s[m];  B'[m] = (B[m] - mean[m]) * s[m] +
//   bias[m]
// The folded weights are new initializers; the originals stay for any other reader (and are
// dropped by dead-node elimination otherwise). Runs before the activation fusion, so
// Conv -> BN -> Relu ends as one Conv with a Relu post-op.
#include <cmath>

#include "runtime/passes/passes.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

// The constant float vector of length m named `name`, or nullptr.
const float* channel_vector(const Graph& g, const std::string& name, int64_t m) {
  auto it = g.initializers.find(name);
  if (it == g.initializers.end()) return nullptr;
  const Tensor& t = it->second;
  if (t.dtype() != DType::Float || t.rank() != 1 || t.shape()[0] != m) return nullptr;
  return t.data<float>();
}

}  // namespace

Graph fold_conv_batchnorm(const Graph& graph) {
  Graph g = graph;
  const ValueUses uses(graph);
  std::vector<char> removed(g.nodes.size(), 0);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& conv = g.nodes[i];
    if (conv.op_type != "Conv" || conv.domain != kOnnxDomain || conv.outputs.size() != 1 ||
        conv.inputs.size() < 2 || conv.inputs.size() > 3)
      continue;
    auto w = g.initializers.find(conv.inputs[1]);
    if (w == g.initializers.end() || w->second.dtype() != DType::Float || w->second.rank() < 3)
      continue;
    const auto next = uses.sole_reader(conv.outputs[0]);
    if (!next || removed[*next]) continue;
    const Node& bn = g.nodes[*next];
    if (bn.op_type != "BatchNormalization" || bn.domain != kOnnxDomain || bn.inputs.size() != 5 ||
        bn.inputs[0] != conv.outputs[0] || bn.attr_int("training_mode", 0) != 0 ||
        (bn.outputs.size() > 1 && !bn.outputs[1].empty()))
      continue;
    const Tensor& weights = w->second;
    const int64_t m = weights.shape()[0];
    const float* scale = channel_vector(g, bn.inputs[1], m);
    const float* shift = channel_vector(g, bn.inputs[2], m);
    const float* mean = channel_vector(g, bn.inputs[3], m);
    const float* var = channel_vector(g, bn.inputs[4], m);
    const float* bias = conv.has_input(2) ? channel_vector(g, conv.inputs[2], m) : nullptr;
    if (!scale || !shift || !mean || !var || (conv.has_input(2) && !bias)) continue;
    const float eps = bn.attr_float("epsilon", 1e-5f);

    Tensor folded_w = allocate_tensor(DType::Float, weights.shape());
    Tensor folded_b = allocate_tensor(DType::Float, {m});
    const int64_t per_channel = weights.numel() / std::max<int64_t>(m, 1);
    const float* src = weights.data<float>();
    float* dst = folded_w.data<float>();
    for (int64_t c = 0; c < m; ++c) {
      // In double: var + eps near zero and large scales keep their precision.
      const double s = static_cast<double>(scale[c]) / std::sqrt(static_cast<double>(var[c]) + eps);
      for (int64_t k = 0; k < per_channel; ++k)
        dst[c * per_channel + k] = static_cast<float>(src[c * per_channel + k] * s);
      folded_b.data<float>()[c] =
          static_cast<float>(((bias ? bias[c] : 0.0) - mean[c]) * s + shift[c]);
    }
    const std::string wn = conv.name + "/W_bn_folded", bname = conv.name + "/B_bn_folded";
    if (g.initializers.count(wn) || g.initializers.count(bname)) continue;  // name taken
    g.initializers[wn] = std::move(folded_w);
    g.initializers[bname] = std::move(folded_b);
    conv.inputs.resize(3);
    conv.inputs[1] = wn;
    conv.inputs[2] = bname;
    conv.outputs[0] = bn.outputs[0];
    removed[*next] = 1;
  }
  erase_marked(g.nodes, removed);
  return g;
}

}  // namespace volt
