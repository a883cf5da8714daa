#include "runtime/training/autodiff.hpp"

#include <map>
#include <queue>
#include <set>

#include "operators/grad/gradient_rule.hpp"
#include "runtime/error.hpp"

namespace volt {
namespace {

// The opset backward nodes of the default domain are written at (Split and ReduceSum take
// their sizes/axes as inputs there).
constexpr int kBackwardOpset = 18;

class Emitter final : public GradEmitter {
 public:
  Emitter(Graph& g, const Node& fwd, std::map<std::string, std::vector<std::string>>& grads,
          const std::set<std::string>& needs, std::map<std::string, Shape>& shapes, int& counter)
      : g_(g), fwd_(fwd), grads_(grads), needs_(needs), shapes_(shapes), counter_(counter) {}

  const Node& node() const override { return fwd_; }
  std::string grad_of_output(size_t i) const override {
    auto it = resolved_.find(i);
    return it == resolved_.end() ? std::string() : it->second;
  }
  bool needs_grad(size_t i) const override {
    return i < fwd_.inputs.size() && !fwd_.inputs[i].empty() && needs_.count(fwd_.inputs[i]);
  }
  void set_grad(size_t i, const std::string& grad) override {
    if (needs_grad(i)) grads_[fwd_.inputs[i]].push_back(grad);
  }
  std::optional<Shape> static_shape(const std::string& v) const override {
    auto it = shapes_.find(v);
    return it == shapes_.end() ? std::nullopt : std::optional<Shape>(it->second);
  }
  std::vector<std::string> emit(const std::string& op, const std::vector<std::string>& inputs,
                                std::map<std::string, Attribute> attrs, size_t outputs,
                                const std::string& domain) override {
    Node n;
    n.op_type = op;
    n.domain = canonical_domain(domain);
    n.opset = n.domain == kOnnxDomain ? kBackwardOpset : 1;
    n.name = "grad/" + fwd_.name + "/" + op + "_" + std::to_string(counter_++);
    n.inputs = inputs;
    n.attributes = std::move(attrs);
    for (size_t i = 0; i < outputs; ++i) n.outputs.push_back(n.name + ":" + std::to_string(i));
    std::vector<std::string> outs = n.outputs;
    g_.nodes.push_back(std::move(n));
    return outs;
  }
  std::string constant(const Tensor& t) override {
    const std::string name = "grad/const_" + std::to_string(counter_++);
    g_.initializers[name] = t;
    shapes_[name] = t.shape();
    return name;
  }
  void resolve_output(size_t i, const std::string& g) { resolved_[i] = g; }

 private:
  Graph& g_;
  const Node& fwd_;
  std::map<std::string, std::vector<std::string>>& grads_;
  const std::set<std::string>& needs_;
  std::map<std::string, Shape>& shapes_;
  int& counter_;
  std::map<size_t, std::string> resolved_;
};

// Node indices in topological order (the graph need not be sorted).
std::vector<size_t> topological(const Graph& g) {
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs)
      if (!o.empty()) producer[o] = i;
  std::vector<int> pending(g.nodes.size(), 0);
  std::vector<std::vector<size_t>> users(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& in : g.nodes[i].inputs) {
      auto it = producer.find(in);
      if (in.empty() || it == producer.end()) continue;
      ++pending[i];
      users[it->second].push_back(i);
    }
  std::queue<size_t> ready;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!pending[i]) ready.push(i);
  std::vector<size_t> order;
  while (!ready.empty()) {
    const size_t i = ready.front();
    ready.pop();
    order.push_back(i);
    for (size_t u : users[i])
      if (--pending[u] == 0) ready.push(u);
  }
  return order;
}

}  // namespace

std::vector<std::string> append_gradients(Graph& graph, const GradientRequest& req,
                                          const std::string& source) {
  const std::vector<size_t> order = topological(graph);
  const size_t forward_nodes = graph.nodes.size();
  // Values that depend on a wrt value (forward reachability) ...
  std::set<std::string> depends(req.wrt.begin(), req.wrt.end());
  for (size_t i : order)
    for (const auto& in : graph.nodes[i].inputs)
      if (!in.empty() && depends.count(in))
        for (const auto& o : graph.nodes[i].outputs) depends.insert(o);
  // ... and values y depends on (backward reachability).
  std::set<std::string> ancestors{req.y};
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Node& n = graph.nodes[*it];
    bool feeds = false;
    for (const auto& o : n.outputs) feeds = feeds || ancestors.count(o);
    if (feeds)
      for (const auto& in : n.inputs) ancestors.insert(in);
  }
  std::set<std::string> needs;
  for (const auto& v : depends)
    if (ancestors.count(v)) needs.insert(v);

  std::map<std::string, Shape> shapes;
  for (const auto& [name, t] : graph.initializers) shapes[name] = t.shape();
  auto annotate = [&](const ValueInfo& v) {
    if (!v.has_shape) return;
    Shape s;
    for (const auto& d : v.shape) {
      if (!d.is_fixed()) return;
      s.push_back(d.value);
    }
    shapes[v.name] = s;
  };
  for (const auto& v : graph.inputs) annotate(v);
  for (const auto& v : graph.value_info) annotate(v);

  std::map<std::string, std::vector<std::string>> grads;
  int counter = 0;
  // The seed.
  {
    Node seed_owner;
    seed_owner.name = "seed";
    Emitter e(graph, seed_owner, grads, needs, shapes, counter);
    grads[req.y].push_back(req.seed.empty() ? e.emit1("OnesLike", {req.y}, {}, kVoltDomain)
                                            : req.seed);
  }
  auto total = [&](const std::string& v, Emitter& e) -> std::string {
    auto it = grads.find(v);
    if (it == grads.end() || it->second.empty()) return "";
    if (it->second.size() == 1) return it->second[0];
    const std::string s = e.emit1("Sum", it->second);
    it->second = {s};
    return s;
  };
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (*it >= forward_nodes) continue;
    const Node fwd = graph.nodes[*it];  // a copy: emitting appends to graph.nodes
    bool relevant = false;
    for (const auto& o : fwd.outputs) relevant = relevant || (needs.count(o) && grads.count(o));
    if (!relevant) continue;
    Emitter e(graph, fwd, grads, needs, shapes, counter);
    for (size_t i = 0; i < fwd.outputs.size(); ++i)
      if (!fwd.outputs[i].empty()) e.resolve_output(i, total(fwd.outputs[i], e));
    const GradientRule* rule = find_gradient_rule(fwd.domain, fwd.op_type);
    VOLT_CHECK(rule, NotImplemented,
               source + ": " + fwd.describe() + ": op '" + fwd.op_type +
                   "' has no gradient rule, and it lies between a trained value and '" + req.y +
                   "'");
    (*rule)(e);
  }
  std::vector<std::string> out;
  Node tail;
  tail.name = "result";
  Emitter e(graph, tail, grads, needs, shapes, counter);
  for (const auto& w : req.wrt) {
    const std::string g = total(w, e);
    out.push_back(g.empty() ? e.emit1("ZerosLike", {w}, {}, kVoltDomain) : g);
  }
  return out;
}

}  // namespace volt
