#include "runtime/training/parameters.hpp"

#include <algorithm>
#include <set>

namespace volt {
namespace {

bool is_float(DType t) {
  return t == DType::Float || t == DType::Double || t == DType::Float16 || t == DType::BFloat16;
}

bool wanted(const std::string& name, int64_t numel, const std::vector<std::string>& prefixes) {
  if (default_parameter_size(numel)) return true;
  for (const auto& p : prefixes)
    if (!p.empty() && name.rfind(p, 0) == 0) return true;
  return false;
}

// A float Constant's tensor, when the node is one.
const Tensor* float_constant(const Node& n) {
  if (n.op_type != "Constant" || n.domain != kOnnxDomain || n.outputs.size() != 1 ||
      n.outputs[0].empty())
    return nullptr;
  auto a = n.attributes.find("value");
  if (a == n.attributes.end() || a->second.type != Attribute::Type::Tensor) return nullptr;
  return is_float(a->second.t.dtype()) ? &a->second.t : nullptr;
}

void collect_names(const Graph& g, std::multiset<std::string>& names) {
  for (const auto& v : g.inputs) names.insert(v.name);
  for (const auto& [name, _] : g.initializers) names.insert(name);
  for (const Node& n : g.nodes) {
    for (const auto& o : n.outputs)
      if (!o.empty()) names.insert(o);
    for (const auto& [_, a] : n.attributes) {
      if (a.g) collect_names(*a.g, names);
      for (const auto& sg : a.graphs) collect_names(*sg, names);
    }
  }
}

struct Lifter {
  Graph& main;
  const std::vector<std::string>& prefixes;
  std::multiset<std::string> names;  // every value name of the model, with repeats
  std::vector<std::string> lifted;

  // A nested graph's name can move up only when nothing else in the model is called so.
  bool unique(const std::string& name) const { return names.count(name) == 1; }

  void take(const std::string& name, const Tensor& t) {
    main.initializers[name] = t;
    lifted.push_back(name);
  }

  // Constants of `g` (the main graph when top), then the branches of its If nodes.
  void lift(Graph& g, bool top) {
    std::vector<Node> kept;
    for (Node& n : g.nodes) {
      const Tensor* t = float_constant(n);
      if (t && wanted(n.outputs[0], t->numel(), prefixes) && (top || unique(n.outputs[0]))) {
        take(n.outputs[0], *t);
        continue;
      }
      if (n.op_type == "If" && n.domain == kOnnxDomain)
        for (auto& [key, a] : n.attributes) {
          if (!a.g) continue;
          a.g = std::make_shared<Graph>(*a.g);  // bodies may be shared with other copies
          lift_branch(*a.g);
        }
      kept.push_back(std::move(n));
    }
    g.nodes = std::move(kept);
  }

  void lift_branch(Graph& body) {
    for (auto it = body.initializers.begin(); it != body.initializers.end();) {
      const bool overridable = std::any_of(body.inputs.begin(), body.inputs.end(),
                                           [&](const ValueInfo& v) { return v.name == it->first; });
      if (is_float(it->second.dtype()) && !overridable &&
          !body.sparse_initializers.count(it->first) &&
          wanted(it->first, it->second.numel(), prefixes) && unique(it->first)) {
        take(it->first, it->second);
        it = body.initializers.erase(it);
      } else {
        ++it;
      }
    }
    lift(body, false);
  }
};

}  // namespace

std::vector<std::string> lift_parameters(Graph& graph,
                                         const std::vector<std::string>& wanted_prefixes) {
  Lifter l{graph, wanted_prefixes, {}, {}};
  collect_names(graph, l.names);
  l.lift(graph, true);
  return l.lifted;
}

const Node* first_quantized_node(const Graph& graph) {
  static const std::set<std::string> quantized = {"ConvInteger", "MatMulInteger", "QuantizeLinear",
                                                  "DequantizeLinear", "DynamicQuantizeLinear"};
  for (const Node& n : graph.nodes) {
    if (n.domain == kOnnxDomain &&
        (quantized.count(n.op_type) || n.op_type.rfind("QLinear", 0) == 0))
      return &n;
    for (const auto& [_, a] : n.attributes) {
      std::vector<std::shared_ptr<Graph>> subs = a.graphs;
      if (a.g) subs.push_back(a.g);
      for (const auto& sg : subs)
        if (const Node* q = first_quantized_node(*sg)) return q;
    }
  }
  return nullptr;
}

}  // namespace volt
