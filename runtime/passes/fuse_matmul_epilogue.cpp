// A linear layer's epilogue runs inside its MatMul (oneDNN bias and post-ops) instead of as
// separate passes over the output:
//   MatMul(a, W) -> Add(·, b) -> activation -> Add(·, r)
// becomes MatMul(a, W, b, r) with volt.activation: input 2 the bias (constant, shape [N]; ""
// when there is none), input 3 a residual added after the activation. W must be a constant
// 2-D weight. A constant scale per output column (or a scalar) after the bias is folded into
// W and the bias. Each intermediate must have the next node as its only reader. A Gemm (which has
// its bias as C already) takes the activation after it the same way. A MatMul of any operands
// takes a constant scalar Div or Mul straight after it as volt.product_scale (Y = scale · A B).
#include <algorithm>
#include <cmath>
#include <set>

#include "runtime/passes/passes.hpp"

namespace volt {

Graph fuse_matmul_epilogue(const Graph& graph) {
  PatternRewrite rw(graph);
  Graph& g = rw.graph();
  auto next_of = [&](const std::string& v) { return rw.sole_reader(v); };
  for (Node& gemm : g.nodes) {
    if (!is_onnx_op(gemm, "Gemm") || gemm.outputs.size() != 1 || gemm.has_attr("volt.activation"))
      continue;
    Node* next = next_of(gemm.outputs[0]);
    if (!next) continue;
    auto attrs = activation_attributes(g, *next);
    if (attrs.empty()) continue;
    gemm.attributes.merge(attrs);
    rw.remove(next);
    gemm.outputs[0] = next->outputs[0];
  }
  std::set<std::string> names = value_names(g);
  for (Node& mm : g.nodes) {
    // (Three inputs: a MatMul this pass fused before, with a bias and maybe an activation; it
    // runs again after use_channels_last, which removes Transposes that kept the two apart.)
    // (Not one that writes its product transposed, volt.perm_y: the epilogue's operands
    // broadcast along the product's own axes.)
    if (!is_onnx_op(mm, "MatMul") || mm.inputs.size() < 2 || mm.inputs.size() > 3 ||
        mm.outputs.size() != 1 || rw.removed(&mm) || mm.has_attr("volt.perm_y"))
      continue;
    auto w = g.initializers.find(mm.inputs[1]);
    if (w == g.initializers.end() || w->second.rank() != 2 || w->second.dtype() != DType::Float)
      continue;
    const int64_t n = w->second.shape()[1];
    std::string out = mm.outputs[0];
    std::string bias = mm.inputs.size() == 3 ? mm.inputs[2] : std::string(), residual;
    bool activated = mm.has_attr("volt.activation"), changed = false;
    Node* next = next_of(out);
    auto take = [&](Node* node) {
      rw.remove(node);
      out = node->outputs[0];
      next = next_of(out);
      changed = true;
    };
    if (next && !activated && bias.empty() && is_onnx_op(*next, "Add") &&
        next->inputs.size() == 2) {
      const std::string b = next->inputs[0] == out ? next->inputs[1] : next->inputs[0];
      auto bw = g.initializers.find(b);
      if (bw != g.initializers.end() && bw->second.shape() == Shape{n} &&
          bw->second.dtype() == DType::Float) {
        bias = b;
        take(next);
      }
    }
    // A constant scale per output column (a layer scale) or a scalar goes into the weights and
    // the bias: (A W + b) s = A (W s) + b s, one pass over the output fewer, and a residual Add
    // after it can then be the MatMul's too.
    if (next && !activated && is_onnx_op(*next, "Mul") && next->inputs.size() == 2 &&
        next->inputs[0] != next->inputs[1]) {
      const std::string& c = next->inputs[0] == out ? next->inputs[1] : next->inputs[0];
      const Tensor* t = constant_value(g, c);
      if (t && t->dtype() == DType::Float && t->rank() <= 1 &&
          (t->numel() == 1 || t->numel() == n)) {
        const float* scale = t->data<float>();
        const bool finite =
            std::all_of(scale, scale + t->numel(), [](float v) { return std::isfinite(v); });
        if (finite) {
          auto scaled = [&](const Tensor& from, int64_t rows, const std::string& base) {
            Tensor to = Tensor::empty(DType::Float, from.shape());
            const float* x = from.data<float>();
            float* y = to.data<float>();
            for (int64_t r = 0; r < rows; ++r)
              for (int64_t j = 0; j < n; ++j)
                y[r * n + j] = x[r * n + j] * scale[t->numel() == 1 ? 0 : j];
            const std::string name = unique_name(g, names, base);
            names.insert(name);
            g.initializers[name] = std::move(to);
            return name;
          };
          const Tensor& weights = w->second;
          mm.inputs[1] = scaled(weights, weights.shape()[0], mm.name + "/scaled_weights");
          if (!bias.empty()) bias = scaled(g.initializers.at(bias), 1, mm.name + "/scaled_bias");
          take(next);
        }
      }
    }
    if (next && !activated) {
      auto attrs = activation_attributes(g, *next);
      if (!attrs.empty()) {
        mm.attributes.merge(attrs);
        activated = true;
        take(next);
      }
    }
    // The residual may take the output's buffer (in place), so it must not be the MatMul's A.
    if (next && is_onnx_op(*next, "Add") && next->inputs.size() == 2 &&
        next->inputs[0] != next->inputs[1]) {
      const std::string r = next->inputs[0] == out ? next->inputs[1] : next->inputs[0];
      if (r != mm.inputs[0]) {
        residual = r;
        take(next);
      }
    }
    if (!changed) continue;
    mm.inputs.resize(2);
    mm.inputs.push_back(bias);
    if (!residual.empty()) mm.inputs.push_back(residual);
    mm.outputs[0] = out;
  }
  // A constant scalar that scales the product straight after it (attention's scores divided by
  // sqrt(d)) becomes the product's scale, for any operands: oneDNN's output scale, one pass
  // over the scores fewer. Multiplying by 1/c instead of dividing by c may differ in the last bit.
  for (Node& mm : g.nodes) {
    if (!is_onnx_op(mm, "MatMul") || rw.removed(&mm) || mm.inputs.size() != 2 ||
        mm.outputs.size() != 1 || mm.has_attr("volt.activation") ||
        mm.has_attr("volt.product_scale"))
      continue;
    Node* next = next_of(mm.outputs[0]);
    if (!next || next->inputs.size() != 2 || next->outputs.size() != 1 ||
        next->inputs[0] == next->inputs[1])
      continue;
    const bool div = is_onnx_op(*next, "Div") && next->inputs[0] == mm.outputs[0];
    if (!div && !is_onnx_op(*next, "Mul")) continue;
    const std::string& c = next->inputs[0] == mm.outputs[0] ? next->inputs[1] : next->inputs[0];
    // Of rank 0 or 1, so that broadcasting it leaves the product's shape as it is.
    const Tensor* t = constant_value(g, c);
    const auto v = constant_scalar(g, c);
    if (!t || t->rank() > 1 || !v || !std::isfinite(*v) || *v == 0) continue;
    mm.attributes["volt.product_scale"] = float_attr(div ? 1.0f / *v : *v);
    rw.remove(next);
    mm.outputs[0] = next->outputs[0];
  }
  return rw.finish();
}

}  // namespace volt
