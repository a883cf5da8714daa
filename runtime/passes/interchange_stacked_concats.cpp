// A stack of concatenations whose first (or last) parts are the slices of one tensor along the
// stacking axis becomes one concatenation of that tensor with the stack of the other parts:
//
//   Concat_a(Unsqueeze_a(Concat_b(Gather_a(X, j), Y_j)) for j < n)
//     == Concat_b'(X, Concat_a(Unsqueeze_a(Y_j) for j < n))        (X's axis a has n entries)
//
// with b' = b where b < a, else b + 1 (b counts the axes of a slice, which lacks axis a). A
// decoder exported from PyTorch writes its present keys and values so: per layer,
// stack(cat(past[i][0], k), cat(past[i][1], v)), then a stack of the layers; every past entry
// was copied once into its layer's keys or values, again into the layer's stack, and again into
// the present. Rewritten, the layer's keys and values are views of one concatenation
// (Gather_a(new, j) for the Concat_b each one was), and the present is one concatenation of the
// past with the new entries: one copy of the past, not three, and the stacks of the new entries
// alone have shapes that do not change with the past's length.
//
// Where the readers of some Concat_b come before the new entries all exist (a layer reads its
// keys before the next layer computes its own), the Concat_b stay for them, and the stack reads
// X and the new parts rather than them: no copy is saved there, but the Concat_b no longer live
// until the stack. Each Unsqueeze is read by the stack alone; the rank of X and its axis a are
// known from the graph inputs' declared shapes (main graph only), and each Gather picks a
// constant scalar index, j for part j.
#include <algorithm>
#include <optional>

#include "runtime/passes/passes.hpp"
#include "runtime/passes/symbolic_shapes.hpp"

namespace volt {
namespace {

std::optional<int64_t> normalized_axis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

// The single axis an Unsqueeze inserts, as written (before normalizing); nullopt for none or
// several, or axes not a constant.
std::optional<int64_t> unsqueeze_axis(const Graph& g, const Node& u) {
  if (u.opset >= 13) {
    const Tensor* t = u.has_input(1) ? constant_value(g, u.inputs[1]) : nullptr;
    if (!t || t->dtype() != DType::Int64 || t->numel() != 1) return std::nullopt;
    return t->data<int64_t>()[0];
  }
  const std::vector<int64_t> axes = u.attr_ints("axes");
  if (axes.size() != 1) return std::nullopt;
  return axes[0];
}

// The constant scalar index a Gather picks, normalized by `extent`; nullopt where it is not one.
std::optional<int64_t> scalar_index(const Graph& g, const Node& gather, int64_t extent) {
  const Tensor* t = gather.has_input(1) ? constant_value(g, gather.inputs[1]) : nullptr;
  if (!t || t->rank() != 0 || t->numel() != 1) return std::nullopt;
  int64_t i = 0;
  if (t->dtype() == DType::Int64)
    i = t->data<int64_t>()[0];
  else if (t->dtype() == DType::Int32)
    i = t->data<int32_t>()[0];
  else
    return std::nullopt;
  return normalized_axis(i, extent);
}

// One match: the stack `outer` of n Unsqueezes of Concats, each of the slice j of `x` (at
// position `slice_at` of its Concat) and another part.
struct StackedConcats {
  size_t outer;
  std::vector<size_t> unsqueezes, concats, gathers;
  std::string x;
  int slice_at;
  int64_t stack_axis, concat_axis;  // a, and b' (in X's axes)
};

std::optional<StackedConcats> match(const Graph& g, const ValueUses& uses,
                                    const SymbolicGraph& shapes, size_t o) {
  const Node& outer = g.nodes[o];
  if (!is_onnx_op(outer, "Concat") || outer.inputs.size() < 2 || !outer.has_output(0) ||
      !outer.has_attr("axis"))
    return std::nullopt;
  StackedConcats m{o, {}, {}, {}, "", -1, -1, -1};
  const int64_t n = static_cast<int64_t>(outer.inputs.size());
  int64_t rank = -1;
  for (int64_t j = 0; j < n; ++j) {
    const std::string& part = outer.inputs[static_cast<size_t>(j)];
    const auto u = uses.producer(part);
    if (part.empty() || !u || uses.sole_reader(part) != o) return std::nullopt;
    const Node& unsqueeze = g.nodes[*u];
    if (!is_onnx_op(unsqueeze, "Unsqueeze") || !unsqueeze.has_input(0)) return std::nullopt;
    const auto c = uses.producer(unsqueeze.inputs[0]);
    if (!c || uses.is_graph_output(unsqueeze.inputs[0])) return std::nullopt;
    const Node& concat = g.nodes[*c];
    if (!is_onnx_op(concat, "Concat") || concat.inputs.size() != 2 || !concat.has_attr("axis"))
      return std::nullopt;
    // The part that is a slice of X: the same position in every Concat.
    int at = -1;
    for (int k = 0; k < 2 && at < 0; ++k) {
      const auto s = uses.producer(concat.inputs[static_cast<size_t>(k)]);
      if (!s || !is_onnx_op(g.nodes[*s], "Gather") || !g.nodes[*s].has_input(0)) continue;
      if (m.slice_at < 0 || k == m.slice_at) at = k;
    }
    if (at < 0) return std::nullopt;
    const size_t s = *uses.producer(concat.inputs[static_cast<size_t>(at)]);
    const Node& gather = g.nodes[s];
    if (j == 0) {
      m.x = gather.inputs[0];
      m.slice_at = at;
      const SymbolicValue* xv = shapes.find(m.x);
      if (!xv || !xv->rank_known || xv->dims.size() < 2) return std::nullopt;
      rank = static_cast<int64_t>(xv->dims.size());
      const auto a = normalized_axis(outer.attr_int("axis"), rank);
      const auto extent = a && xv->dims[static_cast<size_t>(*a)]
                              ? xv->dims[static_cast<size_t>(*a)]->as_constant()
                              : std::nullopt;
      if (!a || extent != n) return std::nullopt;
      m.stack_axis = *a;
      const auto b = normalized_axis(concat.attr_int("axis"), rank - 1);
      if (!b) return std::nullopt;
      m.concat_axis = *b < m.stack_axis ? *b : *b + 1;
    }
    if (gather.inputs[0] != m.x ||
        normalized_axis(gather.attr_int("axis", 0), rank) != m.stack_axis ||
        scalar_index(g, gather, n) != j)
      return std::nullopt;
    const auto a = unsqueeze_axis(g, unsqueeze);
    const auto b = normalized_axis(concat.attr_int("axis"), rank - 1);
    if (!a || normalized_axis(*a, rank) != m.stack_axis || !b ||
        (*b < m.stack_axis ? *b : *b + 1) != m.concat_axis)
      return std::nullopt;
    m.unsqueezes.push_back(*u);
    m.concats.push_back(*c);
    m.gathers.push_back(s);
  }
  return m;
}

// The node index after which every one of `values` exists (-1: all are graph inputs or
// initializers).
int64_t made_by(const ValueUses& uses, const std::vector<std::string>& values) {
  int64_t last = -1;
  for (const std::string& v : values)
    if (const auto p = uses.producer(v)) last = std::max(last, static_cast<int64_t>(*p));
  return last;
}

// Whether some Concat stacks Unsqueezes only: the graphs without one (nearly all) skip the
// symbolic shapes.
bool has_stack(const Graph& g, const ValueUses& uses) {
  for (const Node& n : g.nodes) {
    if (!is_onnx_op(n, "Concat") || n.inputs.size() < 2) continue;
    bool stack = true;
    for (const std::string& in : n.inputs) {
      const auto p = uses.producer(in);
      stack = stack && p && is_onnx_op(g.nodes[*p], "Unsqueeze");
    }
    if (stack) return true;
  }
  return false;
}

// Rewrites one match; false where none is found.
bool rewrite_one(Graph& g) {
  const ValueUses uses(g);
  if (!has_stack(g, uses)) return false;
  const SymbolicGraph shapes(g, /*trust_input_shapes=*/true);
  for (size_t o = 0; o < g.nodes.size(); ++o) {
    const auto m = match(g, uses, shapes, o);
    if (!m) continue;
    const Node& outer = g.nodes[o];
    std::set<std::string> taken = value_names(g);
    auto fresh = [&](const std::string& base) {
      std::string name = unique_name(g, taken, base);
      taken.insert(name);
      return name;
    };
    // The other parts, stacked.
    std::vector<Node> added;
    std::vector<std::string> others, stacked;
    for (size_t j = 0; j < m->concats.size(); ++j) {
      const Node& concat = g.nodes[m->concats[j]];
      others.push_back(concat.inputs[1 - static_cast<size_t>(m->slice_at)]);
      Node u = g.nodes[m->unsqueezes[j]];
      u.inputs[0] = others.back();
      u.outputs = {fresh(u.outputs[0] + "/other")};
      u.name = u.outputs[0];
      stacked.push_back(u.outputs[0]);
      added.push_back(std::move(u));
    }
    Node stack = outer;
    stack.inputs = stacked;
    stack.outputs = {fresh(outer.outputs[0] + "/others")};
    stack.name = stack.outputs[0];
    Node joined = outer;
    joined.inputs = m->slice_at == 0 ? std::vector<std::string>{m->x, stack.outputs[0]}
                                     : std::vector<std::string>{stack.outputs[0], m->x};
    joined.attributes["axis"].i = m->concat_axis;
    added.push_back(std::move(stack));
    added.push_back(std::move(joined));
    // Where every reader of the Concats comes after the new parts exist, they read the joined
    // value's slices instead (a Gather of it, at the Concat's place).
    std::vector<std::string> inputs = others;
    inputs.push_back(m->x);
    const int64_t ready = made_by(uses, inputs);
    bool redirect = true;
    for (const size_t c : m->concats)
      for (const auto& r : uses.readers(g.nodes[c].outputs[0]))
        redirect = redirect && (std::find(m->unsqueezes.begin(), m->unsqueezes.end(), r.node) !=
                                    m->unsqueezes.end() ||
                                static_cast<int64_t>(r.node) > ready);
    std::vector<char> removed(g.nodes.size(), 0);
    for (const size_t u : m->unsqueezes) removed[u] = 1;
    removed[o] = 1;
    if (redirect)
      for (size_t j = 0; j < m->concats.size(); ++j) {
        const Node& concat = g.nodes[m->concats[j]];
        Node slice = g.nodes[m->gathers[j]];
        slice.inputs[0] = outer.outputs[0];
        slice.outputs = concat.outputs;
        slice.name = concat.name;
        added.push_back(std::move(slice));
        removed[m->concats[j]] = 1;
      }
    // (Where the Concats' readers take slices of the joined value: right after the last of the
    // new parts is made, before any of those readers. Otherwise at the outer Concat's place.)
    const size_t at = redirect ? static_cast<size_t>(ready + 1) : o;
    std::vector<Node> nodes;
    nodes.reserve(g.nodes.size() + added.size());
    for (size_t i = 0; i <= g.nodes.size(); ++i) {
      if (i == at)
        for (Node& a : added) nodes.push_back(std::move(a));
      if (i < g.nodes.size() && !removed[i]) nodes.push_back(std::move(g.nodes[i]));
    }
    g.nodes = std::move(nodes);
    return true;
  }
  return false;
}

}  // namespace

Graph interchange_stacked_concats(const Graph& graph) {
  Graph g = graph;
  // (A layer's stack rewritten exposes the stack of the layers; each rewrite removes a Concat.)
  while (rewrite_one(g)) {
  }
  return g;
}

}  // namespace volt
