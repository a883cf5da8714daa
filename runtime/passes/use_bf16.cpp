// precision = bf16: the convolutions and linear layers with constant fp32 weights compute in
// bfloat16 (AVX512_BF16 dot products, twice the fp32 rate on CPUs that have them) with fp32
// accumulation. Marks them volt.compute = "bf16"; the kernels convert the weights once per plan
// and fp32 activations on the way in. A convolution whose every reader is such a convolution
// (the 1x1 -> 3x3 -> 1x1 chain of a bottleneck block) hands its output over in bf16
// (volt.output = "bf16"): the reader would round it to bf16 first anyway, so this only saves
// the fp32 write and the conversion pass, and the result is the same bits. Everything else stays
// fp32: the normalizations, softmax, residual sums, graph outputs and what other ops read.
#include "runtime/passes/passes.hpp"

namespace volt {

namespace {
bool computes_in_bf16(const Node& n) {
  return n.attr_string("volt.compute", "") == "bf16";
}
}  // namespace

Graph use_bf16(const Graph& graph) {
  Graph g = graph;
  for (Node& n : g.nodes) {
    const bool conv = is_onnx_op(n, "Conv"), matmul = is_onnx_op(n, "MatMul");
    if ((!conv && !matmul) || n.inputs.size() < 2) continue;
    auto w = g.initializers.find(n.inputs[1]);
    if (w == g.initializers.end() || w->second.dtype() != DType::Float) continue;
    if (matmul && w->second.rank() != 2) continue;
    n.attributes["volt.compute"] = string_attribute("bf16");
  }
  const ValueUses uses(g);
  for (Node& n : g.nodes) {
    // A fused residual is added in the output's dtype: those stay fp32.
    if (!is_onnx_op(n, "Conv") || !computes_in_bf16(n) || n.outputs.size() != 1 || n.has_input(3))
      continue;
    const std::string& y = n.outputs[0];
    const auto& readers = uses.readers(y);
    bool all_bf16_convs = !readers.empty() && !uses.is_graph_output(y);
    for (const auto& r : readers)
      all_bf16_convs = all_bf16_convs && r.slot == 0 && is_onnx_op(g.nodes[r.node], "Conv") &&
                       computes_in_bf16(g.nodes[r.node]);
    if (!all_bf16_convs) continue;
    n.attributes["volt.output"] = string_attribute("bf16");
    // The readers' X is bf16 while their W stays fp32: no longer one type variable.
    for (const auto& r : readers)
      if (!g.nodes[r.node].input_type_group.empty()) g.nodes[r.node].input_type_group[0] = -1;
  }
  return g;
}

}  // namespace volt
