// ReduceMean over every spatial axis of an image ([N, C, H, W] averaged over H and W) becomes
// GlobalAveragePool, then Flatten where the reduced axes are dropped: global average pooling
// as torchvision's MNASNet (x.mean([2, 3])) and other exporters write it. Likewise over axes
// 1 and 2 of an image transposed to channels-last (Keras models through tf2onnx), the pool
// reading the image before the Transpose (and a Transpose of its [N, C, 1, 1] after, where the
// axes are kept). The layout passes keep pools in the convolutions' channels-last or blocked
// layout; a ReduceMean was outside it, so the whole last activation went back to NCHW first
// (MNASNet at batch 1: the reorder and the mean took 176 us of a 7 ms run, the pool, its exit
// and the Flatten 37 us; keras_nhwc's mean 78 -> 28 us at batch 1, 326 -> 279 us at batch 8).
//
// Without shape inference the rank comes from the graph's declarations or from the producers:
// a convolution's output has its weights' rank, an elementwise op's the largest of its inputs'.
// Only float images qualify (a convolution's output, or a declared float input).
#include <optional>
#include <set>

#include "runtime/passes/passes.hpp"

namespace volt {
namespace {

constexpr int kMaxDepth = 32;  // producers followed back from the ReduceMean

bool float_type(DType t) {
  return t == DType::Float || t == DType::Float16 || t == DType::BFloat16 || t == DType::Double;
}

// The rank of `v` when it is known to be a float tensor; nullopt otherwise.
std::optional<int> float_rank(const Graph& g, const ValueUses& uses, const std::string& v,
                              int depth) {
  if (depth > kMaxDepth) return std::nullopt;
  if (const Tensor* c = constant_value(g, v))
    return float_type(c->dtype()) ? std::optional<int>(static_cast<int>(c->rank())) : std::nullopt;
  if (const ValueInfo* info = declared_value(g, v))
    return info->has_shape && info->kind == ValueInfo::Kind::Tensor && float_type(info->dtype)
               ? std::optional<int>(static_cast<int>(info->shape.size()))
               : std::nullopt;
  const auto p = uses.producer(v);
  if (!p) return std::nullopt;
  const Node& n = g.nodes[*p];
  if (n.domain != kOnnxDomain || n.outputs.empty() || n.outputs[0] != v) return std::nullopt;
  if (n.op_type == "Conv" || n.op_type == "ConvTranspose") {
    const Tensor* w = n.inputs.size() > 1 ? constant_value(g, n.inputs[1]) : nullptr;
    return w && float_type(w->dtype()) ? std::optional<int>(static_cast<int>(w->rank()))
                                       : std::nullopt;
  }
  static const std::set<std::string> unary = {
      "Relu",      "LeakyRelu", "PRelu",    "Clip",    "Sigmoid", "HardSigmoid",
      "HardSwish", "Tanh",      "Elu",      "Selu",    "Celu",    "Mish",
      "Softplus",  "Gelu",      "Identity", "Dropout", "Erf",     "Softsign"};
  if (unary.count(n.op_type) || n.op_type == "BatchNormalization")
    return n.inputs.empty() ? std::nullopt : float_rank(g, uses, n.inputs[0], depth + 1);
  if (n.op_type == "Add" || n.op_type == "Sub" || n.op_type == "Mul" || n.op_type == "Div") {
    if (n.inputs.size() != 2) return std::nullopt;
    const auto a = float_rank(g, uses, n.inputs[0], depth + 1);
    const auto b = a ? float_rank(g, uses, n.inputs[1], depth + 1) : std::nullopt;
    if (!a || !b) return std::nullopt;
    return std::max(*a, *b);
  }
  return std::nullopt;
}

// The axes `n` reduces (attribute up to opset 17, constant input from 18); nullopt when they
// are not known here or the node reduces all axes for want of them.
std::optional<std::vector<int64_t>> reduced_axes(const Graph& g, const Node& n) {
  if (n.opset < 18) {
    if (!n.has_attr("axes")) return std::nullopt;
    return n.attr_ints("axes");
  }
  if (n.inputs.size() < 2 || n.inputs[1].empty()) return std::nullopt;
  const Tensor* axes = constant_value(g, n.inputs[1]);
  if (!axes || axes->dtype() != DType::Int64 || axes->rank() != 1) return std::nullopt;
  return std::vector<int64_t>(axes->data<int64_t>(), axes->data<int64_t>() + axes->numel());
}

// Whether `axes` are exactly the spatial axes 2 .. rank-1, in any order and sign.
bool spatial_axes(std::vector<int64_t> axes, int rank) {
  if (rank < 3 || axes.size() != static_cast<size_t>(rank - 2)) return false;
  std::set<int64_t> seen;
  for (int64_t a : axes) {
    if (a < 0) a += rank;
    if (a < 2 || a >= rank) return false;
    seen.insert(a);
  }
  return seen.size() == axes.size();
}

// [0, 2, ..., rank-1, 1]: channels-first to channels-last.
std::vector<int64_t> to_channels_last_perm(int rank) {
  std::vector<int64_t> perm{0};
  for (int64_t a = 2; a < rank; ++a) perm.push_back(a);
  perm.push_back(1);
  return perm;
}

// Axes 1 .. rank-2 of a channels-last value as the channels-first axes they are (one up); any
// other axis maps outside the spatial ones.
std::vector<int64_t> as_channels_first_axes(std::vector<int64_t> axes, int rank) {
  for (int64_t& a : axes) {
    if (a < 0) a += rank;
    a = a >= 1 && a <= rank - 2 ? a + 1 : -rank - 1;
  }
  return axes;
}

}  // namespace

Graph reduce_mean_as_global_pool(const Graph& graph) {
  const ValueUses uses(graph);
  std::set<std::string> taken;  // (made at the first rewrite that adds a value)
  Graph g = graph;
  std::vector<Node> out;
  out.reserve(g.nodes.size());
  bool changed = false;
  for (Node& n : g.nodes) {
    const auto axes = is_onnx_op(n, "ReduceMean") && !n.inputs.empty() && n.outputs.size() == 1
                          ? reduced_axes(graph, n)
                          : std::nullopt;
    if (!axes) {
      out.push_back(std::move(n));
      continue;
    }
    // The image: the ReduceMean's input, or (channels-last) the channels-first value a
    // Transpose to channels-last made it from.
    std::string image = n.inputs[0];
    int channels_last_rank = 0;  // (0: the input is the image)
    const auto rank = float_rank(graph, uses, image, 0);
    if (!rank || !spatial_axes(*axes, *rank)) {
      const auto p = uses.producer(image);
      const Node* t = p ? &graph.nodes[*p] : nullptr;
      const auto r = t && is_onnx_op(*t, "Transpose") && t->inputs.size() == 1
                         ? float_rank(graph, uses, t->inputs[0], 0)
                         : std::nullopt;
      if (!r || *r < 3 || t->attr_ints("perm") != to_channels_last_perm(*r) ||
          !spatial_axes(as_channels_first_axes(*axes, *r), *r)) {
        out.push_back(std::move(n));
        continue;
      }
      image = t->inputs[0];
      channels_last_rank = *r;
    }
    changed = true;
    const std::string result = n.outputs[0];
    const bool keep = n.attr_int("keepdims", 1) != 0;
    if (keep && !channels_last_rank) {
      out.push_back(make_node(n.name, "GlobalAveragePool", {image}, {result}, 1));
      continue;
    }
    if (taken.empty()) taken = value_names(graph);
    const std::string pooled = unique_name(graph, taken, result + "/pooled");
    taken.insert(pooled);
    out.push_back(make_node(n.name, "GlobalAveragePool", {image}, {pooled}, 1));
    // [N, C, 1...]: without the axes, [N, C]; kept channels-last, [N, 1..., C].
    Node after = keep ? make_node(n.name + "/channels_last", "Transpose", {pooled}, {result}, 13)
                      : make_node(n.name + "/flatten", "Flatten", {pooled}, {result}, 13);
    if (keep)
      after.attributes["perm"] = ints_attr(to_channels_last_perm(channels_last_rank));
    else
      after.attributes["axis"] = int_attr(1);
    out.push_back(std::move(after));
  }
  if (!changed) return graph;
  g.nodes = std::move(out);
  return g;
}

}  // namespace volt
