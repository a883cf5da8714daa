// precision = fp16 (on an accelerator): the graph computes in IEEE half. Float initializers (or,
// for training, casts of them each run) and Constant values become fp16 once, at session
// creation; float graph inputs are cast to fp16 on entry and float outputs back to fp32 on
// exit, so callers see the model's declared types; casts to float inside the graph cast to fp16
// instead, keeping the graph in one float type. BatchNormalization's parameters stay fp32. The
// kernels keep accumulations, Softmax and normalization statistics in fp32 (device_kernels.hpp,
// cuBLAS with CUBLAS_COMPUTE_32F).
#include <map>

#include "runtime/passes/passes.hpp"

namespace volt {
namespace {

Tensor to_fp16(const Tensor& t) {
  Tensor h = Tensor::empty(DType::Float16, t.shape());
  const float* src = t.data<float>();
  Float16* dst = h.data<Float16>();
  for (int64_t i = 0; i < t.numel(); ++i) dst[i] = Float16(src[i]);
  return h;
}

// Every Gather reading `weight` as its data (and nothing else reading it), when its outputs are
// not graph outputs; empty otherwise.
std::vector<size_t> gather_only_readers(const Graph& g, const ValueUses& uses,
                                        const std::string& weight) {
  std::vector<size_t> gathers;
  for (const auto& r : uses.readers(weight)) {
    if (r.slot != 0 || !is_onnx_op(g.nodes[r.node], "Gather") ||
        uses.is_graph_output(g.nodes[r.node].outputs[0]))
      return {};
    gathers.push_back(r.node);
  }
  return gathers;
}

// Whether every reader of `weight` takes it as BatchNormalization's scale, bias or statistics,
// which stay fp32 (the kernels normalize in fp32; cuDNN wants them so with fp16 data); if so,
// those inputs are untied from X's type variable, as opset 15's schema has them.
bool keep_fp32_for_normalization(Graph& g, const ValueUses& uses, const std::string& weight) {
  const auto& readers = uses.readers(weight);
  for (const auto& r : readers)
    if (r.slot == ValueUses::kSubgraph || r.slot == 0 ||
        !is_onnx_op(g.nodes[r.node], "BatchNormalization"))
      return false;
  for (const auto& r : readers) {
    auto& groups = g.nodes[r.node].input_type_group;
    if (r.slot < groups.size()) groups[r.slot] = -1;
  }
  return !readers.empty();
}

// Float weights stay fp32 and a Cast node makes their fp16 copy each run. A table read only by
// Gather is cast after the Gather instead, so a batch converts only the rows it reads and the
// table's gradient stays a gather's (row-sparse). Readers inside subgraphs keep the fp32 value.
void cast_weights_each_run(Graph& g, std::vector<Node>& casts) {
  const ValueUses uses(g);
  for (const auto& [name, t] : g.initializers) {
    if (t.dtype() != DType::Float || uses.readers(name).empty() ||
        keep_fp32_for_normalization(g, uses, name))
      continue;
    const std::vector<size_t> gathers = gather_only_readers(g, uses, name);
    for (size_t node : gathers) {
      std::string& rows = g.nodes[node].outputs[0];
      casts.push_back(cast_node(rows + "@fp32", rows, DType::Float16));
      rows += "@fp32";
    }
    if (!gathers.empty()) continue;
    const std::string half = name + "@fp16";
    casts.push_back(cast_node(name, half, DType::Float16));
    for (const auto& r : uses.readers(name))
      if (r.slot != ValueUses::kSubgraph) g.nodes[r.node].inputs[r.slot] = half;
  }
}

}  // namespace

Graph use_fp16(const Graph& graph, Fp16Weights weights) {
  Graph g = graph;
  std::vector<Node> casts;
  if (weights == Fp16Weights::CastEachRun) {
    cast_weights_each_run(g, casts);
  } else {
    const ValueUses uses(g);
    for (auto& [name, t] : g.initializers)
      if (t.dtype() == DType::Float && !keep_fp32_for_normalization(g, uses, name)) t = to_fp16(t);
  }
  for (Node& n : g.nodes) {
    if (is_onnx_op(n, "Cast") && n.attr_int("to", 0) == static_cast<int64_t>(DType::Float))
      n.attributes["to"].i = static_cast<int64_t>(DType::Float16);
    for (const char* key : {"value"})
      if ((is_onnx_op(n, "Constant") || is_onnx_op(n, "ConstantOfShape")) && n.has_attr(key) &&
          n.attributes.at(key).type == Attribute::Type::Tensor &&
          n.attributes.at(key).t.dtype() == DType::Float)
        n.attributes[key].t = to_fp16(n.attributes.at(key).t);
  }
  cast_graph_boundary(g, graph, DType::Float, DType::Float16, "fp16");
  for (auto& c : casts) g.nodes.push_back(std::move(c));
  return g;
}

}  // namespace volt
