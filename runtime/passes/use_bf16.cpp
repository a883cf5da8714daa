// precision = bf16: the convolutions and linear layers with constant fp32 weights compute in
// bfloat16 (AVX512_BF16 dot products, twice the fp32 rate on CPUs that have them) with fp32
// accumulation. Marks them volt.compute = "bf16"; the kernels convert the weights once per plan
// and fp32 activations on the way in. A convolution whose every reader is such a convolution
// hands its output over in bf16 (volt.output = "bf16"). Read as X (the 1x1 -> 3x3 -> 1x1 chain
// of a bottleneck block), the reader would round it to bf16 first anyway: the same bits, minus an
// fp32 write and a conversion pass. Read as a fused residual (a ResNet's block outputs, read by
// the next block's convolutions and its residual sum), the sum sees the residual rounded to bf16
// (relative 2^-9) and adds in fp32. Everything else stays fp32: the normalizations, softmax,
// graph outputs and what other ops read.
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
    n.attributes["volt.compute"] = string_attr("bf16");
  }
  const ValueUses uses(g);
  for (Node& n : g.nodes) {
    if (!is_onnx_op(n, "Conv") || !computes_in_bf16(n) || n.outputs.size() != 1) continue;
    const std::string& y = n.outputs[0];
    const auto& readers = uses.readers(y);
    bool all_bf16_convs = !readers.empty() && !uses.is_graph_output(y);
    for (const auto& r : readers)
      all_bf16_convs = all_bf16_convs && (r.slot == 0 || r.slot == 3) &&
                       is_onnx_op(g.nodes[r.node], "Conv") && computes_in_bf16(g.nodes[r.node]);
    if (!all_bf16_convs) continue;
    n.attributes["volt.output"] = string_attr("bf16");
    // The readers' X (or residual) is bf16 while their W stays fp32: no longer one type variable.
    for (const auto& r : readers) {
      auto& groups = g.nodes[r.node].input_type_group;
      if (r.slot < groups.size()) groups[r.slot] = -1;
    }
  }
  return g;
}

}  // namespace volt
