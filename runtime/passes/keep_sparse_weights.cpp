// Sparse weights (the model's 2-D sparse_initializers) stay sparse where MatMul reads them:
//   MatMul(S, B)  ->  the sparse × dense kernel reads S in CSR form;
//   MatMul(X, S)  ->  Transpose(MatMul(Sᵀ, Transpose(X))) with Sᵀ in CSR form, X 2-D.
// Every other reader keeps the dense copy; a dense copy nothing reads any more is dropped.
#include <set>
#include <vector>

#include "runtime/passes/passes.hpp"

namespace volt {
namespace {

// Sᵀ in CSR, built directly (a counting sort by column): no dense copy of a large weight.
CsrTensor transposed(const CsrTensor& a) {
  const int64_t* off = a.row_offsets().data<int64_t>();
  const int64_t* col = a.col_indices().data<int64_t>();
  const float* val = a.values().data<float>();
  std::vector<int64_t> t_off(static_cast<size_t>(a.cols()) + 1, 0), t_col(a.nnz());
  std::vector<float> t_val(static_cast<size_t>(a.nnz()));
  for (int64_t i = 0; i < a.nnz(); ++i) ++t_off[static_cast<size_t>(col[i]) + 1];
  for (int64_t c = 0; c < a.cols(); ++c) t_off[c + 1] += t_off[c];
  std::vector<int64_t> next(t_off.begin(), t_off.end() - 1);
  for (int64_t r = 0; r < a.rows(); ++r)
    for (int64_t i = off[r]; i < off[r + 1]; ++i) {
      const int64_t k = next[static_cast<size_t>(col[i])]++;
      t_col[k] = r;
      t_val[k] = val[i];
    }
  return CsrTensor::copy_of(DType::Float, a.cols(), a.rows(), a.nnz(), t_off.data(), t_col.data(),
                            t_val.data());
}

}  // namespace

Graph keep_sparse_weights(const Graph& graph) {
  if (graph.sparse_initializers.empty()) return graph;
  Graph out = graph;
  out.sparse_initializers.clear();
  std::vector<Node> nodes;
  for (const Node& node : graph.nodes) {
    const bool matmul =
        node.op_type == "MatMul" && node.domain == kOnnxDomain && node.inputs.size() == 2;
    auto sparse = [&](size_t i) { return graph.sparse_initializers.count(node.inputs[i]) != 0; };
    if (matmul && sparse(0) && !sparse(1) && declared_rank(graph, node.inputs[1]) == 2) {
      Node n = node;
      n.inputs[0] = node.inputs[0] + "/csr";
      out.sparse_initializers[n.inputs[0]] = graph.sparse_initializers.at(node.inputs[0]);
      nodes.push_back(std::move(n));
    } else if (matmul && sparse(1) && !sparse(0) && declared_rank(graph, node.inputs[0]) == 2) {
      const std::string s = node.inputs[1] + "/csr_transposed";
      if (!out.sparse_initializers.count(s))
        out.sparse_initializers[s] = transposed(graph.sparse_initializers.at(node.inputs[1]));
      const std::string xt = node.name + "/x_transposed", yt = node.name + "/y_transposed";
      nodes.push_back(
          make_node(node.name + "/transpose_x", "Transpose", {node.inputs[0]}, {xt}, 13));
      nodes.push_back(make_node(node.name, "MatMul", {s, xt}, {yt}, node.opset));
      nodes.push_back(
          make_node(node.name + "/transpose_y", "Transpose", {yt}, {node.outputs[0]}, 13));
    } else {
      nodes.push_back(node);
    }
  }
  out.nodes = std::move(nodes);
  // Dense copies no node (and no output) reads any more.
  std::set<std::string> read;
  for (const Node& n : out.nodes)
    for (const auto& i : n.inputs) read.insert(i);
  for (const auto& o : out.outputs) read.insert(o.name);
  for (const auto& [name, _] : graph.sparse_initializers) {
    bool is_input = false;
    for (const auto& v : out.inputs) is_input = is_input || v.name == name;
    if (!read.count(name) && !is_input) out.initializers.erase(name);
  }
  return out;
}

}  // namespace volt
