// Shape arithmetic as one node (or a constant) per value an op reads. PyTorch exports
// `x.view(b, t, heads, d)` as Shape -> Gather -> Unsqueeze per dimension, a Concat and the
// Reshape; a transformer layer carries forty such nodes, which a plan for each new input shape
// evaluated one by one (half of a text classifier's planning). What these chains compute is
// known before any input is fed, as polynomials in the graph inputs' open dimensions
// (symbolic_shapes.hpp): a value that is fully known becomes an initializer where it is a
// constant and a volt.ShapeFormula node over the graph inputs otherwise, which the readers
// outside the chain read instead; the chain is then dead. Values read inside subgraphs or
// returned by the graph stay as they are.
#include <set>

#include "operators/common/shape_formula.hpp"
#include "operators/registry.hpp"
#include "runtime/passes/passes.hpp"
#include "runtime/passes/symbolic_shapes.hpp"

namespace volt {
namespace {

bool is_formula(const Node& n) {
  return n.domain == kVoltDomain && n.op_type == "ShapeFormula";
}

// The value's elements as a tensor of its dtype, if each is a constant.
std::optional<Tensor> constant_tensor(const SymbolicValue& v) {
  std::vector<int64_t> c;
  for (const SymDim& e : v.elements) {
    const auto k = e->as_constant();
    if (!k) return std::nullopt;
    c.push_back(*k);
  }
  const Shape shape = v.dims.empty() ? Shape{} : Shape{static_cast<int64_t>(c.size())};
  if (v.dtype == DType::Int64) return Tensor::from(c, shape);
  std::vector<int32_t> narrow;
  for (int64_t x : c) {
    if (x < INT32_MIN || x > INT32_MAX) return std::nullopt;
    narrow.push_back(static_cast<int32_t>(x));
  }
  return Tensor::from(narrow, shape);
}

// The volt.ShapeFormula computing `v` from the graph inputs its symbols stand for.
Node formula_node(const SymbolicGraph& sym, const SymbolicValue& v, const std::string& name) {
  std::vector<std::string> inputs;
  auto slot = [&](const std::string& input) {
    for (size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i] == input) return static_cast<int64_t>(i);
    inputs.push_back(input);
    return static_cast<int64_t>(inputs.size() - 1);
  };
  std::vector<FormulaElement> elements;
  for (const SymDim& e : v.elements) {
    FormulaElement element;
    for (const auto& [monomial, coefficient] : e->terms) {
      FormulaTerm term{coefficient, {}};
      for (int s : monomial) {
        const auto& [input, axis] = sym.symbols()[static_cast<size_t>(s)];
        term.factors.emplace_back(slot(input), axis);
      }
      element.push_back(std::move(term));
    }
    elements.push_back(std::move(element));
  }
  Node n = make_node(name, "ShapeFormula", inputs, {name}, 1);
  n.domain = kVoltDomain;
  n.attributes["formula"] = ints_attr(encode_shape_formula(elements));
  n.attributes["to"] = int_attr(static_cast<int64_t>(v.dtype));
  n.attributes["scalar"] = int_attr(v.dims.empty() ? 1 : 0);
  return n;
}

}  // namespace

Graph fold_shape_arithmetic(const Graph& graph) {
  const SymbolicGraph sym(graph, /*trust_input_shapes=*/true);
  const ValueUses uses(graph);
  // A value the pass can compute without its producer.
  auto foldable = [&](const std::string& v) -> const SymbolicValue* {
    const SymbolicValue* s = v.empty() ? nullptr : sym.find(v);
    const bool integer = s && (s->dtype == DType::Int64 || s->dtype == DType::Int32);
    return integer && s->elements_known() && s->rank_known && s->dims.size() <= 1 &&
                   !uses.is_graph_output(v) && !graph.is_initializer(v)
               ? s
               : nullptr;
  };
  // Readers whose every output is foldable die with the chain: they need no new input.
  auto absorbed = [&](const Node& reader) {
    for (const std::string& out : reader.outputs)
      if (!foldable(out)) return false;
    return !reader.outputs.empty();
  };

  Graph g = graph;
  std::set<std::string> taken = value_names(graph);
  std::vector<Node> formulas;
  bool changed = false;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& producer = graph.nodes[i];
    if (is_formula(producer) || is_onnx_op(producer, "Constant")) continue;
    for (const std::string& v : producer.outputs) {
      const SymbolicValue* s = foldable(v);
      if (!s) continue;
      std::vector<size_t> readers;
      for (const auto& r : uses.readers(v))
        if (r.slot != ValueUses::kSubgraph && !absorbed(graph.nodes[r.node]))
          readers.push_back(r.node);
      if (readers.empty()) continue;
      const std::string name = unique_name(g, taken, v + "/formula");
      taken.insert(name);
      if (std::optional<Tensor> t = constant_tensor(*s))
        g.initializers[name] = std::move(*t);
      else
        formulas.push_back(formula_node(sym, *s, name));
      for (size_t r : readers)
        for (std::string& in : g.nodes[r].inputs)
          if (in == v) in = name;
      changed = true;
    }
  }
  if (!changed) return graph;
  // The formulas read graph inputs only: first, before any reader.
  g.nodes.insert(g.nodes.begin(), formulas.begin(), formulas.end());
  return eliminate_dead_nodes(g);
}

}  // namespace volt
