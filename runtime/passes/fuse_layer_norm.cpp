// Layer normalization as exporters write it before opset 17 becomes one LayerNormalization node
// (run by oneDNN's layer normalization primitive):
//   mean = ReduceMean(x, axes=[-1]);  d = Sub(x, mean);  v = ReduceMean(Pow(d, 2), axes=[-1])
//   y = Div(d, Sqrt(Add(v, eps))) * gamma + beta          (gamma, beta constant; beta optional)
// Every intermediate must have all its readers in the pattern.
#include "runtime/passes/passes.hpp"

namespace volt {
namespace {

// ReduceMean over the last axis only, keeping it (axes as attribute, up to opset 17).
bool mean_over_last_axis(const Node& n) {
  return is_onnx_op(n, "ReduceMean") && n.inputs.size() == 1 && n.outputs.size() == 1 &&
         n.attr_ints("axes", {}) == std::vector<int64_t>{-1} && n.attr_int("keepdims", 1) == 1;
}

}  // namespace

Graph fuse_layer_norm(const Graph& graph) {
  PatternRewrite rw(graph);
  Graph& g = rw.graph();
  const ValueUses& uses = rw.uses();
  auto only = [&](const std::string& v, const char* op) { return rw.sole_reader(v, op); };
  for (const Node& mean : g.nodes) {
    if (rw.removed(&mean) || !mean_over_last_axis(mean)) continue;
    const std::string x = mean.inputs[0];
    const Node* sub = only(mean.outputs[0], "Sub");
    if (!sub || sub->inputs.size() != 2 || sub->inputs[0] != x) continue;
    // d is read by exactly Pow and Div.
    const std::string d = sub->outputs[0];
    const auto& readers = uses.readers(d);
    if (readers.size() != 2 || uses.is_graph_output(d)) continue;
    const Node* pow = nullptr;
    const Node* div = nullptr;
    for (const auto& r : readers) {
      if (r.slot == ValueUses::kSubgraph || rw.removed(&g.nodes[r.node])) break;
      const Node& n = g.nodes[r.node];
      if (is_onnx_op(n, "Pow") && r.slot == 0) pow = &n;
      if (is_onnx_op(n, "Div") && r.slot == 0) div = &n;
    }
    if (!pow || !div) continue;
    const auto exponent = constant_scalar(g, pow->inputs[1]);
    if (!exponent || *exponent != 2.0f) continue;
    const Node* var = only(pow->outputs[0], "ReduceMean");
    if (!var || !mean_over_last_axis(*var)) continue;
    const Node* add_eps = only(var->outputs[0], "Add");
    if (!add_eps || add_eps->inputs[0] != var->outputs[0]) continue;
    const auto eps = constant_scalar(g, add_eps->inputs[1]);
    if (!eps || !(*eps >= 0)) continue;
    const Node* sqrt = only(add_eps->outputs[0], "Sqrt");
    if (!sqrt || div->inputs[1] != sqrt->outputs[0] || !only(sqrt->outputs[0], "Div")) continue;
    const Node* mul = only(div->outputs[0], "Mul");
    if (!mul || mul->inputs.size() != 2) continue;
    const std::string gamma = mul->inputs[0] == div->outputs[0] ? mul->inputs[1] : mul->inputs[0];
    auto gw = g.initializers.find(gamma);
    if (gw == g.initializers.end() || gw->second.rank() != 1 || gw->second.dtype() != DType::Float)
      continue;
    std::vector<const Node*> pattern = {&mean, sub, pow, var, add_eps, sqrt, div, mul};
    std::string beta, y = mul->outputs[0];
    if (const Node* add = only(mul->outputs[0], "Add"); add && add->inputs.size() == 2) {
      const std::string b = add->inputs[0] == y ? add->inputs[1] : add->inputs[0];
      auto bw = g.initializers.find(b);
      if (bw != g.initializers.end() && bw->second.shape() == gw->second.shape() &&
          bw->second.dtype() == DType::Float) {
        beta = b;
        y = add->outputs[0];
        pattern.push_back(add);
      }
    }
    Node ln = make_node(mean.name + "/layer_norm", "LayerNormalization", {x, gamma}, {y}, 17);
    if (!beta.empty()) ln.inputs.push_back(beta);
    ln.attributes["axis"] = int_attr(-1);
    ln.attributes["epsilon"] = float_attr(*eps);
    for (const Node* n : pattern) rw.remove(n);
    rw.replace(mul, std::move(ln));  // x exists before it; y's readers follow it
  }
  return rw.finish();
}

}  // namespace volt
