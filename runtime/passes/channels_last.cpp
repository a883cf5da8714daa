// Keeps 4-D activations channels-last (N×H×W×C) between the ops that can read them so, instead
// of reordering from and back to NCHW around every convolution. oneDNN's convolutions on this
// CPU choose channels-last themselves; with their neighbours agreeing, a ResNet or MobileNet
// runs from its first convolution to its global pool with no reorder at all.
//
// The region: every 2-D Conv and ConvTranspose with constant float weights, and from there the
// pools, Resize and Upsample (their scales and sizes stay in N, C, H, W order), inference
// BatchNormalization with constant parameters, Concat along the
// channels (of region values only; its axis becomes 3), elementwise unary ops and binary ops (both
// operands in the region, or one a constant scalar or per-channel constant, which becomes [C])
// that read region values. Region values are
// renamed "<name>/nhwc" and hold [N, H, W, C]; a Transpose makes the channels-first value for any
// other reader (and for graph outputs) under the original name, and one makes the channels-last
// copy of a Conv input that comes from outside. Conv, pool and Resize nodes in the region get
// volt.layout = "NHWC". A Conv whose X comes from outside (the network's first) reads it
// channels-first (volt.input_layout = "NCHW") and oneDNN's reorder brings it into the primitive's
// layout: on a batch of 8 224x224 images, one thread, the Transpose node took 1.26 ms and the
// reorder takes 0.38 ms. A Transpose to NCHW (perm 0, 3, 1, 2) is in the region with its input as
// its channels-last form, and one back to NHWC (0, 2, 3, 1) of a region value is that value: the
// Transpose pairs converters from TensorFlow put around each convolution cost nothing.
#include <map>
#include <optional>
#include <set>

#include "operators/common/shape_util.hpp"
#include "operators/registry.hpp"
#include "runtime/passes/passes.hpp"

namespace volt {
namespace {

enum class Role {
  None,
  Conv,
  QuantizedConv,
  Pool,
  Unary,
  Binary,
  Resize,
  Concat,
  Norm,
  ToNchw,
  Slice,
  Shuffle
};

const std::vector<int64_t> kToNchw = {0, 3, 1, 2}, kToNhwc = {0, 2, 3, 1};

bool is_transpose(const Node& n, const std::vector<int64_t>& perm) {
  return is_onnx_op(n, "Transpose") && n.inputs.size() == 1 && n.outputs.size() == 1 &&
         n.attr_ints("perm") == perm;
}

bool scalar_constant(const Graph& g, const std::string& name) {
  const Tensor* t = constant_value(g, name);
  return t && t->numel() == 1 && t->rank() <= 1;
}

// A constant that broadcasts along the channels of an N×C×H×W value only: [C, 1, 1] or
// [1, C, 1, 1] (ConvNeXt's layer scale, a per-channel shift). Channels-last, the same data as
// [C] broadcasts the same way. (Not a scalar: scalar_constant.)
bool channel_constant(const Graph& g, const std::string& name) {
  const Tensor* t = constant_value(g, name);
  if (!t || t->numel() <= 1 || t->dtype() == DType::String) return false;
  const Shape& s = t->shape();
  return (s.size() == 3 && s[1] == 1 && s[2] == 1) ||
         (s.size() == 4 && s[0] == 1 && s[2] == 1 && s[3] == 1);
}

// A Slice's axes (explicit: 0, 1, ... for each start when it has none) when they are known now
// and every axis is one a 4-D value has; nullopt otherwise (the Slice kernel reports bad axes on
// the original graph). Starts, ends and steps may be computed (ShuffleNet halves its channels
// at C / 2 from Shape): they index the same axis in either layout.
std::optional<std::vector<int64_t>> slice_axes(const Graph& g, const Node& n) {
  const bool legacy = n.has_attr("starts");  // before opset 10: attributes
  std::vector<int64_t> axes;
  if (legacy) {
    axes = n.attr_ints("axes");
    if (axes.empty())
      for (size_t k = 0; k < n.attr_ints("starts").size(); ++k)
        axes.push_back(static_cast<int64_t>(k));
  } else {
    if (n.inputs.size() < 3) return std::nullopt;
    const bool explicit_axes = n.inputs.size() > 3 && !n.inputs[3].empty();
    const Tensor* t = constant_value(g, n.inputs[explicit_axes ? 3 : 1]);
    if (!t || (t->dtype() != DType::Int64 && t->dtype() != DType::Int32)) return std::nullopt;
    if (explicit_axes) {
      axes = to_int64_vector(*t, n, "axes");
    } else {
      if (t->numel() > 4) return std::nullopt;
      for (int64_t k = 0; k < t->numel(); ++k) axes.push_back(k);
    }
  }
  for (int64_t a : axes)
    if (a < -4 || a > 3) return std::nullopt;
  return axes;
}

// Whether `name`, a Reshape's shape input, has four elements whatever the model is fed: a constant
// of four, a ShapeFormula of four (fold_shape_arithmetic), or (as exporters compute it from
// Shape) the Concat of four one-element parts, each a constant or an Unsqueeze (of a scalar: a
// Reshape's shape is one-dimensional).
bool shape_of_four(const Graph& g, const ValueUses& uses, const std::string& name) {
  if (const Tensor* t = constant_value(g, name)) return t->rank() == 1 && t->numel() == 4;
  auto p = uses.producer(name);
  if (!p) return false;
  const Node& producer = g.nodes[*p];
  if (producer.domain == kVoltDomain && producer.op_type == "ShapeFormula") {
    const std::vector<int64_t> formula = producer.attr_ints("formula");
    return !formula.empty() && formula[0] == 4 && producer.attr_int("scalar", 0) == 0;
  }
  const Node& concat = producer;
  if (!is_onnx_op(concat, "Concat") || concat.inputs.size() != 4) return false;
  for (const std::string& part : concat.inputs) {
    if (const Tensor* t = constant_value(g, part)) {
      if (t->numel() != 1) return false;
      continue;
    }
    auto q = uses.producer(part);
    if (!q || !is_onnx_op(g.nodes[*q], "Unsqueeze")) return false;
  }
  return true;
}

Role role_of(const Graph& g, const ValueUses& uses, const Node& n) {
  if (n.inputs.empty() || n.inputs[0].empty() || n.outputs.empty()) return Role::None;
  // Quantized layers (lower_quantized) and their quantizers: oneDNN's int8 convolutions need
  // channels-last activations even more than its fp32 ones (their channels-first kernel is the
  // reference loop). DynamicQuantizeLinear's scale and zero point are scalars; only its first
  // output is an activation.
  if (n.domain == kVoltDomain && n.op_type == "QuantizedConv" && n.inputs.size() > 2 &&
      !n.has_attr("volt.layout")) {
    auto w = g.initializers.find(n.inputs[2]);
    return w != g.initializers.end() && w->second.rank() == 4 ? Role::QuantizedConv : Role::None;
  }
  // ShuffleNet's channel shuffle (fuse_channel_shuffle), where its output has four dimensions
  // for sure: its channels-last form is each pixel's channels permuted.
  if (n.domain == kVoltDomain && n.op_type == "ChannelShuffle" && n.inputs.size() == 3 &&
      !n.has_attr("volt.layout") && shape_of_four(g, uses, n.inputs[2]))
    return Role::Shuffle;
  if (n.domain == kVoltDomain && n.op_type == "QuantizedAdd" && n.inputs.size() == 2)
    return Role::Binary;
  if (n.domain == kVoltDomain && n.op_type == "QuantizedUnary") return Role::Unary;
  if (is_onnx_op(n, "DynamicQuantizeLinear")) return Role::Unary;
  if ((is_onnx_op(n, "QuantizeLinear") || is_onnx_op(n, "DequantizeLinear")) &&
      n.inputs.size() > 1 && scalar_constant(g, n.inputs[1]))
    return Role::Unary;
  if (n.domain != kOnnxDomain || n.outputs.size() != 1) return Role::None;
  static const std::set<std::string> unary = {"Relu",        "LeakyRelu", "Clip", "Sigmoid", "Tanh",
                                              "HardSigmoid", "HardSwish", "Elu",  "Selu",    "Celu",
                                              "Softplus",    "Softsign",  "Exp",  "Neg",     "Abs",
                                              "Sqrt",        "Erf",       "Mish", "Identity"};
  static const std::set<std::string> pools = {"MaxPool", "AveragePool", "GlobalAveragePool",
                                              "GlobalMaxPool"};
  static const std::set<std::string> binary = {"Add", "Sub", "Mul", "Div"};
  // ConvTranspose reads and writes like a Conv (its input 2 is the bias; it has no residual).
  if (n.op_type == "Conv" || n.op_type == "ConvTranspose") {
    if (n.inputs.size() < 2 || n.has_attr("volt.layout")) return Role::None;
    auto w = g.initializers.find(n.inputs[1]);
    if (w == g.initializers.end() || w->second.rank() != 4) return Role::None;
    const DType dt = w->second.dtype();
    return dt == DType::Float || dt == DType::BFloat16 ? Role::Conv : Role::None;
  }
  if (pools.count(n.op_type)) return n.has_attr("volt.layout") ? Role::None : Role::Pool;
  if (n.op_type == "Resize" || n.op_type == "Upsample")
    return n.has_attr("volt.layout") ? Role::None : Role::Resize;
  // Along the channels (SqueezeNet's fire modules, DenseNet, Inception): axis 3 channels-last.
  if (n.op_type == "Concat" && (n.attr_int("axis", 0) == 1 || n.attr_int("axis", 0) == -3))
    return Role::Concat;
  // Inference BatchNormalization with constant parameters (what folding into a Conv left:
  // DenseNet's BN -> Relu after each Concat) is per channel: its kernel reads NHWC as well.
  if (n.op_type == "BatchNormalization" && n.inputs.size() == 5 &&
      n.attr_int("training_mode", 0) == 0 && !n.has_attr("volt.layout")) {
    for (size_t k = 1; k < 5; ++k)
      if (!g.initializers.count(n.inputs[k])) return Role::None;
    return Role::Norm;
  }
  // Slice with constant starts, ends, axes and steps (a crop after an upsampling): its axes
  // renumbered for N, H, W, C.
  if (n.op_type == "Slice") return slice_axes(g, n) ? Role::Slice : Role::None;
  // A Transpose from NHWC to NCHW (models converted from TensorFlow put them around every
  // convolution): the channels-last form of its output is its input, as it is.
  if (is_transpose(n, kToNchw)) return Role::ToNchw;
  if (unary.count(n.op_type)) return Role::Unary;
  if (binary.count(n.op_type) && n.inputs.size() == 2) return Role::Binary;
  return Role::None;
}

// A Slice of a 4-D region value: each NCHW axis (default: 0, 1, ... for each start) as its NHWC
// position, in the attribute (before opset 10) or a new constant input.
void slice_axes_to_nhwc(Graph& g, Node& n) {
  static constexpr int64_t kPosition[4] = {0, 3, 1, 2};  // N, C, H, W in N×H×W×C
  std::vector<int64_t> axes = *slice_axes(g, n);
  for (int64_t& a : axes) a = kPosition[a < 0 ? a + 4 : a];
  if (n.has_attr("starts")) {
    n.attributes["axes"] = ints_attr(axes);
    return;
  }
  const std::string name = n.name + "/nhwc_axes";
  g.initializers[name] = Tensor::from(axes, {static_cast<int64_t>(axes.size())});
  if (n.inputs.size() < 4) n.inputs.resize(4);
  n.inputs[3] = name;
}

}  // namespace

Graph use_channels_last(const Graph& graph) {
  const size_t count = graph.nodes.size();
  const ValueUses uses(graph);
  std::vector<Role> role(count);
  bool any_conv = false;
  for (size_t i = 0; i < count; ++i) {
    role[i] = role_of(graph, uses, graph.nodes[i]);
    any_conv |= role[i] == Role::Conv || role[i] == Role::QuantizedConv;
  }
  if (!any_conv) return graph;

  // Start with every candidate in the region and drop those whose inputs do not qualify until
  // nothing changes (a node's qualification only depends on its inputs' producers).
  std::vector<char> in(count);
  for (size_t i = 0; i < count; ++i) in[i] = role[i] != Role::None;
  auto region_value = [&](const std::string& v) {
    auto p = uses.producer(v);
    return p && in[*p];
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < count; ++i) {
      if (!in[i]) continue;
      const Node& n = graph.nodes[i];
      bool ok = true;
      switch (role[i]) {
        case Role::Conv:
          ok = !n.has_input(3) || region_value(n.inputs[3]);
          break;
        case Role::QuantizedConv:  // its residual is input 6
          ok = !n.has_input(6) || region_value(n.inputs[6]);
          break;
        case Role::Pool:
        case Role::Unary:
        case Role::Resize:
        case Role::Norm:
        case Role::Slice:
        case Role::Shuffle:
          ok = region_value(n.inputs[0]);
          break;
        case Role::ToNchw:
          break;
        case Role::Concat:
          for (const std::string& v : n.inputs) ok = ok && !v.empty() && region_value(v);
          break;
        case Role::Binary: {
          const bool a = region_value(n.inputs[0]), b = region_value(n.inputs[1]);
          auto fixed = [&](const std::string& v) {
            return scalar_constant(graph, v) || channel_constant(graph, v);
          };
          ok = (a && b) || (a && fixed(n.inputs[1])) || (b && fixed(n.inputs[0]));
          break;
        }
        case Role::None:
          ok = false;
          break;
      }
      if (!ok) {
        in[i] = 0;
        changed = true;
      }
    }
  }

  // A Transpose from NCHW to NHWC of a region value (outside the region) is that value's
  // channels-last form itself: its readers read that.
  std::vector<char> to_nhwc(count);
  for (size_t i = 0; i < count; ++i)
    to_nhwc[i] =
        !in[i] && is_transpose(graph.nodes[i], kToNhwc) && region_value(graph.nodes[i].inputs[0]);

  // A Shape of a region value (ShuffleNet computes each shuffle's shapes from one) reads the
  // channels-last value and gathers its dimensions back into N, C, H, W order: folded when a
  // plan is made, where a Transpose to NCHW for it would copy the tensor at every run.
  std::vector<char> shape_of_region(count);
  for (size_t i = 0; i < count; ++i) {
    const Node& n = graph.nodes[i];
    shape_of_region[i] = !in[i] && is_onnx_op(n, "Shape") && n.inputs.size() == 1 &&
                         n.outputs.size() == 1 && !n.has_attr("start") && !n.has_attr("end") &&
                         region_value(n.inputs[0]);
  }

  // Which input slots of a region node read the channels-last value.
  auto reads_channels_last = [&](size_t node, size_t slot) {
    if (to_nhwc[node] || shape_of_region[node]) return slot == 0;
    if (!in[node] || slot == ValueUses::kSubgraph) return false;
    switch (role[node]) {
      case Role::Conv:
        return slot == 0 || slot == 3;
      case Role::QuantizedConv:
        return slot == 0 || slot == 6;
      case Role::Pool:
      case Role::Unary:
      case Role::Resize:
      case Role::Norm:
      case Role::Slice:
      case Role::Shuffle:
        return slot == 0;
      case Role::Binary:
        return slot < 2 && region_value(graph.nodes[node].inputs[slot]);
      case Role::Concat:
        return true;
      case Role::ToNchw:
      case Role::None:
        return false;
    }
    return false;
  };

  Graph g = graph;
  g.nodes.clear();
  std::set<std::string> converted;  // values from outside with a channels-last copy
  // Values that are other values' data under another name (the Transposes above).
  std::map<std::string, std::string> alias;
  auto resolve = [&](const std::string& v) {
    auto it = alias.find(v);
    return it == alias.end() ? v : it->second;
  };
  for (size_t i = 0; i < count; ++i) {
    Node n = graph.nodes[i];
    if (to_nhwc[i] && !uses.is_graph_output(n.outputs[0])) {
      alias[n.outputs[0]] = resolve(n.inputs[0] + kChannelsLastSuffix);
      continue;
    }
    if (to_nhwc[i]) {  // a graph output: the same data, under its name
      g.nodes.push_back(make_node(n.name, "Identity", {resolve(n.inputs[0] + kChannelsLastSuffix)},
                                  n.outputs, 13));
      continue;
    }
    if (shape_of_region[i]) {
      const std::string dims = n.outputs[0] + "/nhwc_dims", order = n.name + "/nchw_order";
      g.initializers[order] = Tensor::from(kToNchw, {4});
      g.nodes.push_back(make_node(n.name, "Shape", {resolve(n.inputs[0] + kChannelsLastSuffix)},
                                  {dims}, n.opset));
      g.nodes.push_back(make_node(n.name + "/nchw", "Gather", {dims, order}, n.outputs, 13));
      continue;
    }
    if (!in[i]) {
      for (std::string& v : n.inputs) v = resolve(v);
      g.nodes.push_back(std::move(n));
      continue;
    }
    if (role[i] == Role::ToNchw) {
      alias[n.outputs[0] + kChannelsLastSuffix] = resolve(n.inputs[0]);
      // Readers outside the region still get the NCHW value from the Transpose itself.
      bool plain_reader = uses.is_graph_output(n.outputs[0]);
      for (const auto& r : uses.readers(n.outputs[0]))
        plain_reader |= !reads_channels_last(r.node, r.slot);
      n.inputs[0] = resolve(n.inputs[0]);
      if (plain_reader) g.nodes.push_back(std::move(n));
      continue;
    }
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (role[i] == Role::Binary && k < 2 && channel_constant(graph, n.inputs[k])) {
        // The per-channel constant as [C] (one copy per constant, however many nodes read it).
        const std::string v = n.inputs[k] + kChannelsLastSuffix;
        if (!g.initializers.count(v)) {
          const Tensor& t = *constant_value(graph, n.inputs[k]);
          g.initializers[v] = t.reshaped({t.numel()});
        }
        n.inputs[k] = v;
        continue;
      }
      if (!reads_channels_last(i, k)) {
        n.inputs[k] = resolve(n.inputs[k]);
        continue;
      }
      const std::string v = n.inputs[k];
      if (!region_value(v) && k == 0) {  // the Conv reads X channels-first as it comes
        n.attributes["volt.input_layout"] = string_attr("NCHW");
        continue;
      }
      if (!region_value(v)) {  // a residual from outside the region
        if (converted.insert(v).second) {
          Node t = make_node(n.name + "/to_nhwc", "Transpose", {v}, {v + kChannelsLastSuffix}, 13);
          t.attributes["perm"] = ints_attr(kToNhwc);
          g.nodes.push_back(std::move(t));
        }
      }
      n.inputs[k] = resolve(v + kChannelsLastSuffix);
    }
    const std::string out = n.outputs[0];
    n.outputs[0] = out + kChannelsLastSuffix;
    if (role[i] == Role::Conv || role[i] == Role::QuantizedConv || role[i] == Role::Pool ||
        role[i] == Role::Resize || role[i] == Role::Norm || role[i] == Role::Shuffle)
      n.attributes["volt.layout"] = string_attr("NHWC");
    if (role[i] == Role::Concat) n.attributes["axis"].i = 3;
    if (role[i] == Role::Slice) slice_axes_to_nhwc(g, n);
    const std::string name = n.name;
    g.nodes.push_back(std::move(n));
    // Channels-first for whoever else reads it.
    bool plain_reader = uses.is_graph_output(out);
    for (const auto& r : uses.readers(out)) plain_reader |= !reads_channels_last(r.node, r.slot);
    if (plain_reader) {
      Node t = make_node(name + "/to_nchw", "Transpose", {out + kChannelsLastSuffix}, {out}, 13);
      t.attributes["perm"] = ints_attr(kToNchw);
      g.nodes.push_back(std::move(t));
    }
  }
  return g;
}

}  // namespace volt
