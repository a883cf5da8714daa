// Sparse graph inputs: keep them sparse where a kernel can use that, densify explicitly
// elsewhere, so the plan (and the profile) shows where the dense copy happens.
#include <algorithm>

#include "operators/registry.hpp"
#include "runtime/passes/passes.hpp"

namespace volt {
namespace {

// The declared rank of `v`, or of the host value it is a device copy of.
int rank_of(const Graph& g, const std::string& v) {
  const int r = declared_rank(g, v);
  if (r >= 0) return r;
  for (const Node& n : g.nodes)
    if (n.domain == kVoltDomain && n.op_type == "CopyToDevice" && n.outputs[0] == v)
      return declared_rank(g, n.inputs[0]);
  return -1;
}

bool reads_sparse(const Graph& g, const Node& node, size_t input) {
  if (input == 0 && node.domain == kVoltDomain && node.op_type == "CopyToDevice") {
    // The copy to an accelerator moves the CSR matrix as it is when every device node reading
    // the copy multiplies it as it is (cuSPARSE).
    bool any = false;
    for (const Node& reader : g.nodes)
      for (size_t i = 0; i < reader.inputs.size(); ++i)
        if (reader.inputs[i] == node.outputs[0]) {
          if (!reads_sparse(g, reader, i)) return false;
          any = true;
        }
    return any;
  }
  if (input != 0 || node.inputs.size() < 2) return false;
  if (node.domain == kVoltDomain) return node.op_type == "CsrWeightGrad";
  if (node.domain != kOnnxDomain) return false;
  if (node.op_type == "MatMul") return rank_of(g, node.inputs[1]) == 2;
  if (node.op_type == "Gemm")
    return node.attr_int("transA", 0) == 0 && rank_of(g, node.inputs[1]) == 2;
  return false;
}

}  // namespace

Graph densify_sparse_inputs(const Graph& graph, const std::vector<std::string>& sparse_inputs,
                            const std::vector<std::string>& spmm_ok) {
  Graph out = graph;
  for (const std::string& name : sparse_inputs) {
    const bool can_stay = std::find(spmm_ok.begin(), spmm_ok.end(), name) != spmm_ok.end();
    const std::string dense = name + "/densified";
    bool needed = std::any_of(out.outputs.begin(), out.outputs.end(),
                              [&](const ValueInfo& v) { return v.name == name; });
    for (Node& node : out.nodes)
      for (size_t i = 0; i < node.inputs.size(); ++i)
        if (node.inputs[i] == name && !(can_stay && reads_sparse(out, node, i))) {
          node.inputs[i] = dense;
          needed = true;
        }
    for (ValueInfo& v : out.outputs)
      if (v.name == name) v.name = dense;  // a graph output is returned dense
    if (!needed) continue;
    Node densify;
    densify.name = "densify " + name;
    densify.op_type = "Densify";
    densify.domain = kVoltDomain;
    densify.opset = 1;
    densify.inputs = {name};
    densify.outputs = {dense};
    out.nodes.push_back(std::move(densify));  // appended: existing value ids do not move
  }
  return out;
}

}  // namespace volt
