#include "runtime/training/autodiff.hpp"

#include <map>
#include <queue>
#include <set>

#include "operators/grad/gradient_rule.hpp"
#include "runtime/compiled_graph.hpp"
#include "runtime/error.hpp"

namespace volt {
namespace {

// The opset backward nodes of the default domain are written at (Split and ReduceSum take
// their sizes/axes as inputs there).
constexpr int kBackwardOpset = 18;

// What each node reads: its inputs, then the values its subgraphs capture from this scope.
struct Reads {
  std::vector<std::vector<std::string>> captures;  // per node
  explicit Reads(const Graph& g) : captures(g.nodes.size()) {
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      std::set<std::string> seen;
      for (const auto& [_, a] : g.nodes[i].attributes) {
        std::vector<std::shared_ptr<Graph>> subs = a.graphs;
        if (a.g) subs.push_back(a.g);
        for (const auto& sg : subs)
          for (const auto& v : free_values(*sg)) seen.insert(v);
      }
      captures[i].assign(seen.begin(), seen.end());
    }
  }
};

// Whether a gradient can pass from node n's outputs to its input i (or, with i = npos, to the
// values its subgraphs capture). An op without a rule passes everything, so that a gradient
// arriving there is reported rather than dropped.
bool passes_gradient(const Node& n, size_t i) {
  const GradientRuleEntry* entry = find_gradient_rule(n.domain, n.op_type);
  if (!entry) return true;
  return i == std::string::npos ? entry->differentiable.captured : entry->differentiable.input(i);
}

// Node indices in topological order (the graph need not be sorted).
std::vector<size_t> topological(const Graph& g, const Reads& reads) {
  std::map<std::string, size_t> producer;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& o : g.nodes[i].outputs)
      if (!o.empty()) producer[o] = i;
  std::vector<int> pending(g.nodes.size(), 0);
  std::vector<std::vector<size_t>> users(g.nodes.size());
  auto edge = [&](const std::string& in, size_t i) {
    auto it = producer.find(in);
    if (in.empty() || it == producer.end()) return;
    ++pending[i];
    users[it->second].push_back(i);
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const auto& in : g.nodes[i].inputs) edge(in, i);
    for (const auto& in : reads.captures[i]) edge(in, i);
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

// The values from which one of `ys` is reached; through differentiable edges only when
// `differentiable`.
std::set<std::string> ancestors_of(const Graph& g, const Reads& reads,
                                   const std::vector<size_t>& order,
                                   const std::vector<std::string>& ys, bool differentiable) {
  std::set<std::string> out(ys.begin(), ys.end());
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Node& n = g.nodes[*it];
    bool feeds = false;
    for (const auto& o : n.outputs) feeds = feeds || (!o.empty() && out.count(o));
    if (!feeds) continue;
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (!differentiable || passes_gradient(n, i)) out.insert(n.inputs[i]);
    if (!differentiable || passes_gradient(n, std::string::npos))
      for (const auto& c : reads.captures[*it]) out.insert(c);
  }
  out.erase("");
  return out;
}

class Emitter final : public GradEmitter {
 public:
  struct State {
    Graph& g;
    std::map<std::string, std::vector<std::string>>& grads;
    const std::set<std::string>& needs;
    std::map<std::string, Shape>& shapes;
    int& counter;
    const std::string& prefix;
    const std::string& source;
  };
  Emitter(State s, const Node& fwd, std::vector<std::string> captures = {})
      : s_(s), fwd_(fwd), captures_(std::move(captures)) {}

  const Node& node() const override { return fwd_; }
  std::string grad_of_output(size_t i) const override {
    auto it = resolved_.find(i);
    return it == resolved_.end() ? std::string() : it->second;
  }
  bool needs_grad(size_t i) const override {
    return i < fwd_.inputs.size() && !fwd_.inputs[i].empty() && s_.needs.count(fwd_.inputs[i]);
  }
  void set_grad(size_t i, const std::string& grad) override {
    if (!needs_grad(i)) return;
    s_.grads[fwd_.inputs[i]].push_back(grad);
    given_.insert(i);
  }
  std::vector<std::string> captures() const override { return captures_; }
  bool needs_grad_of(const std::string& v) const override { return s_.needs.count(v) > 0; }
  void add_grad(const std::string& v, const std::string& grad) override {
    if (!needs_grad_of(v)) return;
    s_.grads[v].push_back(grad);
    given_captures_.insert(v);
  }
  std::vector<std::string> differentiate(Graph& body, const GradientRequest& request) override {
    return append_gradients(body, request, s_.source);
  }
  std::optional<Shape> static_shape(const std::string& v) const override {
    auto it = s_.shapes.find(v);
    return it == s_.shapes.end() ? std::nullopt : std::optional<Shape>(it->second);
  }
  std::vector<std::string> emit(const std::string& op, const std::vector<std::string>& inputs,
                                std::map<std::string, Attribute> attrs, size_t outputs,
                                const std::string& domain) override {
    Node n;
    n.op_type = op;
    n.domain = canonical_domain(domain);
    n.opset = n.domain == kOnnxDomain ? kBackwardOpset : 1;
    n.name = s_.prefix + fwd_.name + "/" + op + "_" + std::to_string(s_.counter++);
    n.inputs = inputs;
    n.attributes = std::move(attrs);
    for (size_t i = 0; i < outputs; ++i) n.outputs.push_back(n.name + ":" + std::to_string(i));
    std::vector<std::string> outs = n.outputs;
    s_.g.nodes.push_back(std::move(n));
    return outs;
  }
  std::string constant(const Tensor& t) override {
    const std::string name = s_.prefix + "const_" + std::to_string(s_.counter++);
    s_.g.initializers[name] = t;
    s_.shapes[name] = t.shape();
    return name;
  }
  void resolve_output(size_t i, const std::string& g) { resolved_[i] = g; }

  // After the rule: every differentiable input (and capture) that needs a gradient got one.
  // A rule that skips one would train nothing there, silently.
  void check_complete() const {
    for (size_t i = 0; i < fwd_.inputs.size(); ++i)
      VOLT_CHECK(!needs_grad(i) || !passes_gradient(fwd_, i) || given_.count(i), Runtime,
                 s_.source + ": " + fwd_.describe() + ": the gradient rule of '" + fwd_.op_type +
                     "' gave no gradient to input " + std::to_string(i) + " ('" + fwd_.inputs[i] +
                     "')");
    if (passes_gradient(fwd_, std::string::npos))
      for (const auto& c : captures_)
        VOLT_CHECK(!needs_grad_of(c) || given_captures_.count(c), Runtime,
                   s_.source + ": " + fwd_.describe() + ": the gradient rule of '" + fwd_.op_type +
                       "' gave no gradient to the captured value '" + c + "'");
  }

 private:
  State s_;
  const Node& fwd_;
  std::vector<std::string> captures_;
  std::map<size_t, std::string> resolved_;
  std::set<size_t> given_;
  std::set<std::string> given_captures_;
};

}  // namespace

GradientReach gradient_reach(const Graph& graph, const std::string& y) {
  const Reads reads(graph);
  const auto order = topological(graph, reads);
  return {ancestors_of(graph, reads, order, {y}, true),
          ancestors_of(graph, reads, order, {y}, false)};
}

std::string gradient_cuts(const Graph& graph, const std::string& y, const std::string& w) {
  const Reads reads(graph);
  const auto order = topological(graph, reads);
  const std::set<std::string> to_y = ancestors_of(graph, reads, order, {y}, false);
  std::set<std::string> from_w{w};
  std::string out;
  for (size_t i : order) {
    const Node& n = graph.nodes[i];
    bool reached = false, leads = false;
    std::string cut;
    auto note = [&](const std::string& v, bool passes, const std::string& what) {
      if (!from_w.count(v)) return;
      reached = true;
      if (!passes) cut += (cut.empty() ? "" : ", ") + what;
    };
    for (size_t k = 0; k < n.inputs.size(); ++k)
      note(n.inputs[k], passes_gradient(n, k), "input " + std::to_string(k));
    for (const auto& c : reads.captures[i])
      note(c, passes_gradient(n, std::string::npos), "captured '" + c + "'");
    if (!reached) continue;
    for (const auto& o : n.outputs) {
      if (!o.empty()) from_w.insert(o);
      leads = leads || to_y.count(o);
    }
    if (leads && !cut.empty()) out += (out.empty() ? "" : "; ") + n.describe() + " " + cut;
  }
  return out;
}

std::vector<std::string> append_gradients(Graph& graph, const GradientRequest& req,
                                          const std::string& source) {
  const Reads reads(graph);
  const std::vector<size_t> order = topological(graph, reads);
  const size_t forward_nodes = graph.nodes.size();
  std::vector<std::pair<std::string, std::string>> seeds{{req.y, req.seed}};
  seeds.insert(seeds.end(), req.also.begin(), req.also.end());
  std::vector<std::string> ys;
  for (const auto& [y, _] : seeds) ys.push_back(y);
  // Values on a differentiable path from a wrt value to a y: forward from wrt ...
  std::set<std::string> depends(req.wrt.begin(), req.wrt.end());
  for (size_t i : order) {
    const Node& n = graph.nodes[i];
    bool reached = false;
    for (size_t k = 0; k < n.inputs.size(); ++k)
      reached =
          reached || (!n.inputs[k].empty() && depends.count(n.inputs[k]) && passes_gradient(n, k));
    if (passes_gradient(n, std::string::npos))
      for (const auto& c : reads.captures[i]) reached = reached || depends.count(c);
    if (reached)
      for (const auto& o : n.outputs) depends.insert(o);
  }
  // ... and back from y.
  const std::set<std::string> ancestors = ancestors_of(graph, reads, order, ys, true);
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
  const Emitter::State state{graph, grads, needs, shapes, counter, req.prefix, source};
  {
    Node seed_owner;
    seed_owner.name = "seed";
    Emitter e(state, seed_owner);
    for (const auto& [y, seed] : seeds)
      grads[y].push_back(seed.empty() ? e.emit1("OnesLike", {y}, {}, kVoltDomain) : seed);
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
    Emitter e(state, fwd, reads.captures[*it]);
    for (size_t i = 0; i < fwd.outputs.size(); ++i)
      if (!fwd.outputs[i].empty()) e.resolve_output(i, total(fwd.outputs[i], e));
    const GradientRuleEntry* rule = find_gradient_rule(fwd.domain, fwd.op_type);
    VOLT_CHECK(rule, NotImplemented,
               source + ": " + fwd.describe() + ": op '" + fwd.op_type +
                   "' has no gradient rule, and it lies between a trained value and '" + req.y +
                   "'");
    rule->rule(e);
    e.check_complete();
  }
  std::vector<std::string> out;
  Node tail;
  tail.name = "result";
  Emitter e(state, tail);
  for (const auto& w : req.wrt) {
    const std::string g = total(w, e);
    out.push_back(g.empty() ? e.emit1("ZerosLike", {w}, {}, kVoltDomain) : g);
  }
  return out;
}

}  // namespace volt
