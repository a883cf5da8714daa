// Puts each node on the session's accelerator where it has a kernel there, keeps the rest on the
// host, and makes every crossing an explicit copy node (ai.volt CopyToDevice / CopyToHost), one
// per value and direction, so that profiles show them and weights are uploaded once per plan.
//
// What stays on the host although the device could run it:
// - nodes with subgraphs (If, Loop, Scan) and the producers of the values their bodies read;
// - nodes carrying volt.* fusion attributes (CPU epilogues the device kernels do not implement;
//   the channels-last storage attributes are not among them);
// - the shape arithmetic feeding a device kernel's host inputs (Shape -> Gather -> Concat ->
//   Reshape's shape): small int64 tensors the kernel reads on the host anyway.
// Shape and Size read only metadata: they take device values as they are.
#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "operators/registry.hpp"
#include "runtime/device.hpp"
#include "runtime/passes/passes.hpp"

namespace volt {
namespace {

bool reads_metadata_only(const Node& n) {
  const auto defs = KernelRegistry::instance().candidates(n, "cpu");
  return !defs.empty() && defs.front()->reads_metadata_only;
}

bool has_subgraph(const Node& n) {
  for (const auto& [_, a] : n.attributes)
    if (a.g || !a.graphs.empty()) return true;
  return false;
}

// volt.* attributes other than the storage layout (volt.layout NCHW/NHWC and volt.input_layout,
// which the CUDA Conv and pooling kernels read; NCHW16C and NCHW8C blocks are oneDNN's alone).
bool has_fusion_attributes(const Node& n) {
  for (const auto& [key, a] : n.attributes) {
    if (key.rfind("volt.", 0) != 0) continue;
    const bool layout =
        (key == "volt.layout" && (a.s == "NHWC" || a.s == "NCHW")) || key == "volt.input_layout";
    if (!layout) return true;
  }
  return false;
}

// Ops that compute shapes from shapes; kept on the host when they feed a host input.
bool is_shape_arithmetic(const Node& n) {
  static const std::set<std::string> ops = {
      "Shape",      "Size",     "Gather", "Concat", "Unsqueeze", "Squeeze",
      "Slice",      "Cast",     "Add",    "Sub",    "Mul",       "Div",
      "Reshape",    "Constant", "Range",  "Equal",  "Where",     "ConstantOfShape",
      "ReduceProd", "Max",      "Min",    "Neg",    "Floor",     "Ceil",
      "Expand",     "Identity", "Tile",   "Flatten"};
  return n.domain == kOnnxDomain && ops.count(n.op_type) != 0;
}

}  // namespace

Graph place_on_device(const Graph& graph, Device device,
                      const std::function<bool(const Node&)>& device_runs) {
  const std::string kind = device_kind_name(device.kind);
  Graph g = graph;
  const ValueUses uses(g);
  const size_t n = g.nodes.size();
  std::vector<char> on_device(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const Node& node = g.nodes[i];
    on_device[i] = !has_subgraph(node) && !has_fusion_attributes(node) &&
                   !reads_metadata_only(node) && device_runs(node);
  }
  // Host inputs of device kernels: walk their shape arithmetic back onto the host.
  std::function<void(const std::string&)> keep_on_host = [&](const std::string& v) {
    const auto p = uses.producer(v);
    if (!p || !on_device[*p] || !is_shape_arithmetic(g.nodes[*p])) return;
    on_device[*p] = 0;
    for (const auto& in : g.nodes[*p].inputs)
      if (!in.empty()) keep_on_host(in);
  };
  // Per node, the input slots its device kernel reads on the host.
  const KernelRegistry& registry = KernelRegistry::instance();
  std::vector<std::vector<int>> host_slots(n);
  for (size_t i = 0; i < n; ++i) {
    if (!on_device[i]) continue;
    const auto defs = registry.candidates(g.nodes[i], kind);
    if (!defs.empty()) host_slots[i] = defs.front()->host_inputs;
  }
  auto is_host_slot = [&](size_t node, size_t slot) {
    return on_device[node] && std::find(host_slots[node].begin(), host_slots[node].end(),
                                        static_cast<int>(slot)) != host_slots[node].end();
  };
  for (size_t i = 0; i < n; ++i)
    for (int slot : host_slots[i])
      if (g.nodes[i].has_input(static_cast<size_t>(slot)))
        keep_on_host(g.nodes[i].inputs[static_cast<size_t>(slot)]);
  // Values read inside subgraphs are made on the host (bodies run there and name them).
  for (size_t i = 0; i < n; ++i)
    for (const auto& out : g.nodes[i].outputs)
      if (!out.empty())
        for (const auto& r : uses.readers(out))
          if (r.slot == ValueUses::kSubgraph) on_device[i] = 0;

  std::set<std::string> taken = value_names(g);

  auto produced_on_device = [&](const std::string& v) {
    const auto p = uses.producer(v);
    return p && on_device[*p];
  };
  std::map<std::string, std::string> device_copy;  // host value -> its copy on the device
  std::map<std::string, std::string> device_name;  // device value -> renamed (it had host readers)
  std::vector<Node> copies;
  auto copy_node = [&](const char* op, const std::string& in, const std::string& out,
                       bool to_device) {
    Node c;
    c.op_type = op;
    c.domain = kVoltDomain;
    c.opset = 1;
    c.name = out;
    c.inputs = {in};
    c.outputs = {out};
    if (to_device) c.device = kind;
    copies.push_back(std::move(c));
  };
  // Device values that the host reads (or the caller receives) keep their name on the host side.
  for (size_t i = 0; i < n; ++i) {
    if (!on_device[i]) continue;
    for (const auto& out : g.nodes[i].outputs) {
      if (out.empty()) continue;
      bool host_reader = uses.is_graph_output(out);
      for (const auto& r : uses.readers(out))
        host_reader |= (!on_device[r.node] && !reads_metadata_only(g.nodes[r.node])) ||
                       (r.slot != ValueUses::kSubgraph && is_host_slot(r.node, r.slot));
      if (!host_reader) continue;
      const std::string renamed = unique_name(g, taken, out + "@" + kind);
      taken.insert(renamed);
      device_name[out] = renamed;
      copy_node("CopyToHost", renamed, out, false);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    Node& node = g.nodes[i];
    if (on_device[i]) {
      node.device = kind;
      for (auto& out : node.outputs)
        if (device_name.count(out)) out = device_name.at(out);
      for (size_t slot = 0; slot < node.inputs.size(); ++slot) {
        std::string& in = node.inputs[slot];
        if (in.empty() || is_host_slot(i, slot)) continue;  // read on the host, by its own name
        if (produced_on_device(in)) {
          if (device_name.count(in)) in = device_name.at(in);
          continue;
        }
        auto it = device_copy.find(in);
        if (it == device_copy.end()) {
          const std::string copy = unique_name(g, taken, in + "@" + kind);
          taken.insert(copy);
          it = device_copy.emplace(in, copy).first;
          copy_node("CopyToDevice", in, copy, true);
        }
        in = it->second;
      }
    } else if (reads_metadata_only(node) && node.has_input(0) &&
               device_name.count(node.inputs[0])) {
      node.inputs[0] = device_name.at(node.inputs[0]);  // the shape of the device tensor
    }
  }
  for (auto& c : copies) g.nodes.push_back(std::move(c));
  return g;
}

Graph place_on_device(const Graph& graph, Device device) {
  const std::string kind = device_kind_name(device.kind);
  const KernelRegistry& registry = KernelRegistry::instance();
  return place_on_device(graph, device, [&](const Node& node) {
    return registry.has_op(node.domain, node.op_type, node.opset, kind);
  });
}

}  // namespace volt
