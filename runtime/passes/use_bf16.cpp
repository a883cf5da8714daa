// precision = bf16: the convolutions and linear layers with constant fp32 weights compute in
// bfloat16 (AVX512_BF16 dot products, twice the fp32 rate on CPUs that have them) with fp32
// accumulation and fp32 outputs. Marks them volt.compute = "bf16"; the kernels convert the
// weights once per plan and the activations on the way in. Everything else stays fp32: the
// normalizations, softmax, residual sums and the values between layers.
#include "runtime/passes/passes.hpp"

namespace volt {

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
  return g;
}

}  // namespace volt
