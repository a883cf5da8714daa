// Stores the channels-last region's activations in oneDNN's blocks of channels instead: nChw16c
// on AVX-512 (volt.layout = "NCHW16C"), nChw8c on AVX2 ("NCHW8C"), the blocking oneDNN's own
// kernels use on each, where every activation has a multiple of the block's channels and the
// region holds only convolutions, pools, Resizes and Concats along the channels (a ResNet,
// GoogLeNet, a decoder upsampling between convolutions);
// a last convolution with fewer channels than whole blocks reads blocks and writes channels-last.
// On AVX2 its convolutions pick blocks of 8 for themselves, so a channels-last region reordered
// around each one. oneDNN's convolutions take either layout; on blocks, five of ResNet-50's six 1×1
// shapes ran 5-13% faster on this CPU (jit_1x1 against brgconv_1x1 on channels-last; batch 8, one
// thread; the sixth 3% slower), and the Winograd convolutions need no reorder around them. Values
// leave the region through ai.volt ChannelsFirst nodes instead of Transposes. For fp32 only: the
// bf16 path (use_bf16) was built and measured on channels-last.
#include <algorithm>
#include <map>
#include <set>

#include "operators/common/cpu_isa.hpp"
#include "operators/common/layout.hpp"
#include "operators/common/tensor_values.hpp"
#include "operators/registry.hpp"
#include "runtime/passes/passes.hpp"

namespace volt {
namespace {

// A Concat along the channels of region values (GoogLeNet's inception outputs, a U-Net's skip
// connections): in blocks, each input is one contiguous run per image.
bool is_region_concat(const Node& n) {
  if (!is_onnx_op(n, "Concat") || n.attr_int("axis", 0) != 3 || n.outputs.size() != 1 ||
      !is_channels_last_value(n.outputs[0]))
    return false;
  for (const std::string& v : n.inputs)
    if (!is_channels_last_value(v)) return false;
  return !n.inputs.empty();
}

bool is_exit(const Node& n) {
  return is_onnx_op(n, "Transpose") && n.inputs.size() == 1 &&
         is_channels_last_value(n.inputs[0]) &&
         n.attr_ints("perm") == std::vector<int64_t>{0, 3, 1, 2};
}

// Whether a Resize or Upsample keeps the channels (`channels` of its input): its scales or sizes
// are constants that leave the channel axis as it is (a resize of the channels is legal ONNX).
bool keeps_channels(const Graph& g, const Node& n, int64_t channels) {
  if (n.has_attr("scales")) {  // Upsample before opset 9
    const std::vector<float> s = n.attr_floats("scales");
    return s.size() > 1 && s[1] == 1.0f;
  }
  if (n.has_attr("axes")) {  // opset 18: scales and sizes for these axes only
    for (int64_t a : n.attr_ints("axes"))
      if (a == 1 || a == -3) return false;
    return true;
  }
  const bool resize_11 = n.op_type == "Resize" && n.opset >= 11;
  const size_t scales_at = resize_11 ? 2 : 1;
  if (n.inputs.size() > scales_at && !n.inputs[scales_at].empty()) {
    const Tensor* s = constant_value(g, n.inputs[scales_at]);
    if (!s) return false;
    if (s->numel() > 0) return s->numel() == 4 && to_doubles(*s)[1] == 1.0;
  }
  if (!resize_11 || n.inputs.size() < 4 || n.inputs[3].empty()) return false;
  const Tensor* sizes = constant_value(g, n.inputs[3]);
  return sizes && sizes->numel() == 4 && to_doubles(*sizes)[1] == static_cast<double>(channels);
}

bool is_graph_input(const Graph& g, const std::string& v) {
  return std::any_of(g.inputs.begin(), g.inputs.end(),
                     [&](const ValueInfo& i) { return i.name == v; });
}

bool is_graph_output(const Graph& g, const std::string& v) {
  return std::any_of(g.outputs.begin(), g.outputs.end(),
                     [&](const ValueInfo& o) { return o.name == v; });
}

}  // namespace

Graph use_blocked_layout(const Graph& graph) {
  std::vector<const Node*> region;
  std::set<std::string> read_outside;
  for (const Node& n : graph.nodes) {
    if (n.attr_string("volt.layout", "") == "NHWC") {
      const bool conv =
          (is_onnx_op(n, "Conv") || is_onnx_op(n, "ConvTranspose")) && n.outputs.size() == 1;
      const bool pool = n.domain == kOnnxDomain && n.op_type.find("Pool") != std::string::npos &&
                        n.outputs.size() == 1;
      const bool resize =
          (is_onnx_op(n, "Resize") || is_onnx_op(n, "Upsample")) && n.outputs.size() == 1;
      if (!conv && !pool && !resize) return graph;
      region.push_back(&n);
      continue;
    }
    if (is_region_concat(n)) {
      region.push_back(&n);
      continue;
    }
    // Outside the region, only the exits read its values, and Identities that make them NHWC
    // graph outputs (which need them channels-last). (Where elementwise ops of the channels-last
    // region read them, the region stays channels-last: blocking only part of it added reorders
    // around MNASNet's last convolution.)
    for (const std::string& v : n.inputs) {
      if (!is_channels_last_value(v) || is_exit(n)) continue;
      if (!is_onnx_op(n, "Identity") || n.outputs.size() != 1 ||
          !is_graph_output(graph, n.outputs[0]))
        return graph;
      read_outside.insert(v);
    }
  }
  if (region.empty()) return graph;
  // On AVX-512, blocks pay where the region has convolutions that run faster on them: 1x1
  // (jit_1x1) and Winograd's (which needs them). Without either (strided 3x3 stacks), oneDNN's
  // brgemm convolutions on channels-last are faster: a stack of four 3x3 stride-2 convolutions
  // at batch 1 ran in 2.0 ms channels-last against 2.6 ms on nChw16c (unfolded_bn_pad, 3
  // alternating rounds). On AVX2 oneDNN has no such kernel and stages channels-last into blocks
  // around each convolution itself, so blocks stay.
  const bool avx512 = cpu_has_avx512();
  if (avx512 && std::none_of(region.begin(), region.end(), [&](const Node* n) {
        if (n->op_type != "Conv") return false;
        if (n->attr_string("volt.algorithm", "") == "winograd") return true;
        const Tensor* w = constant_value(graph, n->inputs[1]);
        return w && w->rank() == 4 && w->shape()[2] == 1 && w->shape()[3] == 1;
      }))
    return graph;
  const int64_t block = avx512 ? 16 : 8;
  // The channels of each region value: a Conv's from its weights, a pool's from its input (the
  // node list is not in execution order after the fusions: until nothing changes).
  std::map<std::string, int64_t> channels;
  for (bool changed = true; changed;) {
    changed = false;
    for (const Node* n : region) {
      if (channels.count(n->outputs[0])) continue;
      int64_t c = -1;
      if (n->op_type == "Conv" || n->op_type == "ConvTranspose") {
        const Tensor* w = constant_value(graph, n->inputs[1]);
        if (!w || w->rank() != 4) return graph;
        // ConvTranspose's W is [C, M / group, k...].
        c = n->op_type == "Conv" ? w->shape()[0] : w->shape()[1] * n->attr_int("group", 1);
      } else if (n->op_type == "Concat") {
        c = 0;
        for (const std::string& v : n->inputs) {
          auto in = channels.find(v);
          if (in == channels.end()) {
            c = -1;
            break;
          }
          c += in->second;
        }
      } else if (auto in = channels.find(n->inputs[0]); in != channels.end()) {
        const bool resize = n->op_type == "Resize" || n->op_type == "Upsample";
        c = !resize || keeps_channels(graph, *n, in->second) ? in->second : -1;
      }
      if (c < 0) continue;
      channels[n->outputs[0]] = c;
      changed = true;
    }
  }
  auto blocked = [&](const std::string& v) {
    auto c = channels.find(v);
    return c != channels.end() && c->second % block == 0;
  };
  std::set<std::string> region_inputs;  // values some node of the region reads
  for (const Node* n : region)
    for (const std::string& v : n->inputs) region_inputs.insert(v);
  // A convolution at the region's edge whose channels are not whole blocks (a segmentation
  // head's classes, a U-Net's last layer), or whose output a node outside reads channels-last (a
  // tf2onnx graph's NHWC output), reads blocks and writes channels-last, where no node of the
  // region reads its output and it adds no residual.
  std::set<std::string> edge;
  // A convolution whose X is an NHWC graph input (a tf2onnx graph's, the Transpose after it
  // absorbed) reads it so and writes blocks: its primitive reorders X into its layout, where
  // otherwise the whole region stayed channels-last and every convolution in it staged its X and
  // Y through reorders (keras_nhwc batch 8: 14 ms of ~100).
  std::set<std::string> reads_channels_last;  // by output
  for (const Node* n : region) {
    // Every value of the region in blocks, X from the region or channels-first from outside.
    if (!blocked(n->outputs[0]) || read_outside.count(n->outputs[0])) {
      if (n->op_type != "Conv" || n->has_input(3) || region_inputs.count(n->outputs[0]))
        return graph;
      edge.insert(n->outputs[0]);
    }
    if (!n->has_attr("volt.input_layout") && !blocked(n->inputs[0])) {
      if ((n->op_type != "Conv" && n->op_type != "ConvTranspose") ||
          !is_graph_input(graph, n->inputs[0]))
        return graph;
      reads_channels_last.insert(n->outputs[0]);
    }
    if (n->has_input(3) && !blocked(n->inputs[3])) return graph;
    if (n->op_type == "Concat")
      for (const std::string& v : n->inputs)
        if (!blocked(v)) return graph;
  }
  const std::string name = blocked_layout_name(block);
  Graph g = graph;
  for (Node& n : g.nodes) {
    if (!n.outputs.empty() && reads_channels_last.count(n.outputs[0]))
      n.attributes["volt.input_layout"] = string_attr("NHWC");
    if (edge.count(n.outputs.empty() ? "" : n.outputs[0])) {
      if (!n.has_attr("volt.input_layout")) n.attributes["volt.input_layout"] = string_attr(name);
    } else if (n.attr_string("volt.layout", "") == "NHWC" || is_region_concat(n)) {
      n.attributes["volt.layout"] = string_attr(name);
    } else if (is_exit(n) && blocked(n.inputs[0]) && !edge.count(n.inputs[0])) {
      Node exit = make_node(n.name, "ChannelsFirst", n.inputs, n.outputs, 1);
      exit.domain = kVoltDomain;
      exit.attributes["volt.layout"] = string_attr(name);
      n = std::move(exit);
    }
  }
  return g;
}

}  // namespace volt
