// Gradient rule of If: the gradient of the branch taken at run time. The forward If keeps none
// of its branch's intermediate values, so the backward node is an If on the same condition whose
// branches recompute their forward half and differentiate it; each branch returns the gradients
// of the values the branches capture from the enclosing graph (zeros for one it does not read).
// Loop: backpropagation through the iterations. A second, recording Loop reruns the forward and
// stacks each iteration's carried values; a backward Loop then walks the iterations in reverse,
// recomputing each one's body from its recorded inputs and differentiating it: the carried
// values' gradients flow back iteration by iteration, the captured values' are summed over them.
// Scan likewise, its scan inputs read slice by slice (and their gradients stacked back) in the
// directions and along the axes the node says; opset 8's batched Scan is refused.
#include <cstdint>

#include "operators/grad/gradient_rule.hpp"
#include "runtime/error.hpp"

namespace volt {
namespace {

// One branch: its forward nodes, their backward nodes, and an output per wanted capture.
std::shared_ptr<Graph> backward_branch(GradEmitter& e, const char* key,
                                       const std::vector<std::string>& wanted) {
  const Node& n = e.node();
  const std::shared_ptr<Graph> forward = n.attr_graph(key);
  VOLT_CHECK(forward, InvalidModel, n.describe() + ": If has no " + key);
  VOLT_CHECK(forward->outputs.size() >= n.outputs.size(), InvalidModel,
             n.describe() + ": the " + key + " has fewer outputs than the node");
  auto body = std::make_shared<Graph>(*forward);
  const std::string prefix = "grad/" + n.name + "/" + key + "/";
  GradientRequest req;
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    const std::string seed = e.grad_of_output(i);
    // The seeds are the outer graph's values, which branches see.
    if (!seed.empty()) req.seed_output(forward->outputs[i].name, seed);
  }
  req.wrt = wanted;
  req.prefix = prefix;
  const std::vector<std::string> grads = e.differentiate(*body, req);
  // Outputs of their own (a gradient may be an outer value, or the same one twice).
  body->outputs.clear();
  for (size_t j = 0; j < grads.size(); ++j) {
    Node id;
    id.name = prefix + "out" + std::to_string(j);
    id.op_type = "Identity";
    id.opset = 13;
    id.inputs = {grads[j]};
    id.outputs = {id.name};
    ValueInfo out;
    out.name = id.name;
    body->outputs.push_back(out);
    body->nodes.push_back(std::move(id));
  }
  return body;
}

void if_rule(GradEmitter& e) {
  std::vector<std::string> wanted;
  for (const auto& c : e.captures())
    if (e.needs_grad_of(c)) wanted.push_back(c);
  if (wanted.empty()) return;
  std::map<std::string, Attribute> attrs;
  for (const char* key : {"then_branch", "else_branch"})
    attrs[key] = graph_attr(backward_branch(e, key, wanted));
  const auto grads = e.emit("If", {e.input(0)}, std::move(attrs), wanted.size());
  for (size_t j = 0; j < wanted.size(); ++j) e.add_grad(wanted[j], grads[j]);
}

ValueInfo named(const std::string& name) {
  ValueInfo v;
  v.name = name;
  return v;
}

// The backward Loop that Loop's and Scan's rules build. `back` starts as a copy of the forward
// body; the rule adds the prologue that recomputes iteration i = trips - 1 - k from what the
// recording pass stacked, and names what the body's outputs are seeded with. The loop carries
// each state's gradient back (from the node's output's gradient) and each captured value's sum
// over the iterations; `per_iteration` values' gradients (Scan's input slices) come out as its
// scan outputs.
class ReverseLoop {
 public:
  ReverseLoop(GradEmitter& e, const Graph& body, const std::string& trips)
      : e_(e),
        prefix_("grad/" + e.node().name + "/"),
        trips_(trips),
        back_(std::make_shared<Graph>(body)) {
    for (const auto& c : e.captures())
      if (e.needs_grad_of(c)) wanted_.push_back(c);
    back_->inputs = {named(prefix_ + "k"), named(prefix_ + "cond")};
    back_->outputs.clear();
    back_->initializers[prefix_ + "one"] = Tensor::scalar(int64_t{1});
    back_->initializers[prefix_ + "true"] = Tensor::scalar(true);
    step(make_node(last(), "Sub", {trips_, prefix_ + "one"}, {last()}));
    step(make_node(i(), "Sub", {last(), k()}, {i()}));
  }
  const std::string& prefix() const { return prefix_; }
  std::string k() const { return prefix_ + "k"; }  // the backward iteration
  std::string i() const { return prefix_ + "i"; }  // the forward iteration it redoes
  Graph& body() { return *back_; }
  // Adds a node to the prologue (before the recomputed body).
  void step(Node n) { prologue_.push_back(std::move(n)); }
  void gather(const std::string& out, const std::string& from, const std::string& at,
              int64_t axis) {
    Node g = make_node(out, "Gather", {from, at}, {out});
    g.attributes["axis"] = int_attr(axis);
    step(std::move(g));
  }
  // A state carried back: its gradient starts as that of the node's output `node_output` and
  // seeds the body output `body_output`; `body_input` is what the iteration read.
  void carry(size_t node_output, const std::string& body_output, const std::string& body_input) {
    const std::string gv = prefix_ + "gv" + std::to_string(states_.size());
    back_->inputs.push_back(named(gv));
    const std::string g = e_.grad_of_output(node_output);
    initial_.push_back(g.empty() ? e_.emit1("ZerosLike", {e_.output(node_output)}, {}, kVoltDomain)
                                 : g);
    req_.seed_output(body_output, gv);
    states_.push_back(body_input);
  }
  // A body output seeded by one iteration's part of a stacked gradient.
  void seed(const std::string& body_output, const std::string& gradient) {
    req_.seed_output(body_output, gradient);
  }
  // Builds the loop; returns, in order, the gradients of the carried states' initial values and
  // the stacked (in backward order) gradients of `per_iteration`; adds the captured values'.
  // Nothing (and no node) when no gradient reached the node's outputs.
  std::vector<std::string> build(const std::vector<std::string>& per_iteration) {
    if (req_.y.empty()) return {};
    for (size_t c = 0; c < wanted_.size(); ++c) {
      back_->inputs.push_back(named(prefix_ + "gc" + std::to_string(c)));
      initial_.push_back(e_.emit1("ZerosLike", {wanted_[c]}, {}, kVoltDomain));
    }
    back_->nodes.insert(back_->nodes.begin(), prologue_.begin(), prologue_.end());
    req_.wrt = states_;
    req_.wrt.insert(req_.wrt.end(), per_iteration.begin(), per_iteration.end());
    req_.wrt.insert(req_.wrt.end(), wanted_.begin(), wanted_.end());
    req_.prefix = prefix_ + "body/";
    const std::vector<std::string> grads = e_.differentiate(*back_, req_);
    const size_t n = states_.size(), p = per_iteration.size();
    output("cond_out", make_node("", "Identity", {prefix_ + "true"}, {}));
    for (size_t j = 0; j < n; ++j)
      output("gv_next" + std::to_string(j), make_node("", "Identity", {grads[j]}, {}));
    for (size_t c = 0; c < wanted_.size(); ++c)
      output("gc_next" + std::to_string(c),
             make_node("", "Add", {prefix_ + "gc" + std::to_string(c), grads[n + p + c]}, {}));
    for (size_t j = 0; j < p; ++j)
      output("gslice" + std::to_string(j), make_node("", "Identity", {grads[n + j]}, {}));
    std::vector<std::string> ins{trips_, ""};
    ins.insert(ins.end(), initial_.begin(), initial_.end());
    const auto outs = e_.emit("Loop", ins, {{"body", graph_attr(back_)}}, n + wanted_.size() + p);
    for (size_t c = 0; c < wanted_.size(); ++c) e_.add_grad(wanted_[c], outs[n + c]);
    std::vector<std::string> out(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(n));
    out.insert(out.end(), outs.begin() + static_cast<std::ptrdiff_t>(n + wanted_.size()),
               outs.end());
    return out;
  }

 private:
  std::string last() const { return prefix_ + "last"; }
  void output(const std::string& name, Node n) {
    n.name = n.outputs.emplace_back(prefix_ + name);
    back_->nodes.push_back(std::move(n));
    back_->outputs.push_back(named(prefix_ + name));
  }

  GradEmitter& e_;
  std::string prefix_, trips_;
  std::shared_ptr<Graph> back_;
  std::vector<std::string> wanted_, states_, initial_;
  std::vector<Node> prologue_;
  GradientRequest req_;
};

// A copy of `body` that also stacks `values` each iteration (as extra scan outputs).
std::shared_ptr<Graph> recording(const Graph& body, const std::vector<std::string>& values,
                                 const std::string& prefix) {
  auto record = std::make_shared<Graph>(body);
  for (size_t j = 0; j < values.size(); ++j) {
    const std::string out = prefix + "record" + std::to_string(j);
    record->nodes.push_back(make_node(out, "Identity", {values[j]}, {out}));
    record->outputs.push_back(named(out));
  }
  return record;
}

void loop_rule(GradEmitter& e) {
  const Node& n = e.node();
  const std::shared_ptr<Graph> body = n.attr_graph("body");
  VOLT_CHECK(body, InvalidModel, n.describe() + ": Loop has no body");
  const size_t carried = n.inputs.size() > 2 ? n.inputs.size() - 2 : 0;
  VOLT_CHECK(body->inputs.size() == 2 + carried && body->outputs.size() >= 1 + carried,
             InvalidModel, n.describe() + ": the body does not match the loop-carried values");
  const size_t scans = body->outputs.size() - 1 - carried;
  const std::string prefix = "grad/" + n.name + "/";
  // The recording loop: the forward again, with each iteration's carried inputs (and its
  // number, so that an empty loop still says how many iterations it ran) stacked.
  std::vector<std::string> stacked{body->inputs[0].name};
  for (size_t j = 0; j < carried; ++j) stacked.push_back(body->inputs[2 + j].name);
  const auto recorded =
      e.emit("Loop", n.inputs, {{"body", graph_attr(recording(*body, stacked, prefix))}},
             carried + scans + stacked.size());
  const std::string trips = e.emit1("Size", {recorded[carried + scans]});  // the stacked numbers

  ReverseLoop back(e, *body, trips);
  back.step(make_node(prefix + "iteration", "Identity", {back.i()}, {body->inputs[0].name}));
  back.body().initializers[body->inputs[1].name] = Tensor::scalar(true);  // cond_in held true
  for (size_t j = 0; j < carried; ++j) {
    back.gather(body->inputs[2 + j].name, recorded[carried + scans + 1 + j], back.i(), 0);
    back.carry(j, body->outputs[1 + j].name, body->inputs[2 + j].name);
  }
  for (size_t s = 0; s < scans; ++s) {
    const std::string g = e.grad_of_output(carried + s);
    if (g.empty()) continue;
    const std::string at = prefix + "gscan" + std::to_string(s);
    back.gather(at, g, back.i(), 0);
    back.seed(body->outputs[1 + carried + s].name, at);
  }
  const auto grads = back.build({});
  for (size_t j = 0; j < grads.size(); ++j) e.set_grad(2 + j, grads[j]);
}

// Scan: a recording Scan stacks each iteration's states; a backward Loop walks the iterations
// in reverse, slicing the scan inputs (and the scan outputs' gradients) where the forward did,
// and returns each iteration's scan-input gradients as its own scan outputs, which are then put
// in the inputs' order and axis.
void scan_rule(GradEmitter& e) {
  const Node& n = e.node();
  VOLT_CHECK(n.opset >= 9, NotImplemented,
             n.describe() +
                 ": the gradient of opset-8 Scan (batched, with sequence_lens) is not "
                 "supported");
  const std::shared_ptr<Graph> body = n.attr_graph("body");
  VOLT_CHECK(body, InvalidModel, n.describe() + ": Scan has no body");
  const size_t m = static_cast<size_t>(n.attr_int("num_scan_inputs"));
  VOLT_CHECK(m >= 1 && m <= n.inputs.size(), InvalidModel, n.describe() + ": bad num_scan_inputs");
  const size_t states = n.inputs.size() - m;
  VOLT_CHECK(body->inputs.size() == states + m && body->outputs.size() >= states, InvalidModel,
             n.describe() + ": the body does not match the states and scan inputs");
  const size_t k_out = body->outputs.size() - states;
  auto list = [&](const char* key, size_t count) {
    std::vector<int64_t> v = n.attr_ints(key);
    v.resize(count, 0);
    return v;
  };
  const auto in_axes = list("scan_input_axes", m), in_dirs = list("scan_input_directions", m),
             out_axes = list("scan_output_axes", k_out),
             out_dirs = list("scan_output_directions", k_out);
  auto rank_of = [&](const std::string& v) -> int64_t {
    const auto s = e.static_shape(v);
    return s ? static_cast<int64_t>(s->size()) : -1;
  };
  for (size_t j = 0; j < m; ++j)
    VOLT_CHECK(in_axes[j] == 0 || rank_of(n.inputs[states + j]) > 0, NotImplemented,
               n.describe() + ": the gradient of a Scan over axis " + std::to_string(in_axes[j]) +
                   " of an input of unknown rank is not supported");
  for (size_t k = 0; k < k_out; ++k)
    VOLT_CHECK(out_axes[k] == 0, NotImplemented,
               n.describe() + ": the gradient of a Scan stacking outputs along axis " +
                   std::to_string(out_axes[k]) + " is not supported yet");
  const std::string prefix = "grad/" + n.name + "/";

  // The recording Scan: each iteration's states, stacked forward along axis 0.
  std::vector<std::string> stacked;
  for (size_t j = 0; j < states; ++j) stacked.push_back(body->inputs[j].name);
  std::map<std::string, Attribute> rattrs = n.attributes;
  rattrs["body"] = graph_attr(recording(*body, stacked, prefix));
  if (n.has_attr("scan_output_axes") || n.has_attr("scan_output_directions")) {
    rattrs["scan_output_axes"] = ints_attr(list("scan_output_axes", k_out + states));
    rattrs["scan_output_directions"] = ints_attr(list("scan_output_directions", k_out + states));
  }
  const auto recorded = e.emit("Scan", n.inputs, rattrs, states + k_out + states);
  const std::string first_scan = n.inputs[states];
  const std::string trips = e.emit1(
      "Gather",
      {e.shape_of(first_scan),
       e.constant(Tensor::scalar(in_axes[0] < 0 ? in_axes[0] + rank_of(first_scan) : in_axes[0]))});

  ReverseLoop back(e, *body, trips);
  for (size_t j = 0; j < states; ++j) {
    back.gather(body->inputs[j].name, recorded[states + k_out + j], back.i(), 0);
    back.carry(j, body->outputs[j].name, body->inputs[j].name);
  }
  std::vector<std::string> slices;
  for (size_t j = 0; j < m; ++j) {  // forward iteration i read slice i, or T-1-i (= k) reversed
    slices.push_back(body->inputs[states + j].name);
    back.gather(slices.back(), n.inputs[states + j], in_dirs[j] ? back.k() : back.i(), in_axes[j]);
  }
  for (size_t o = 0; o < k_out; ++o) {
    const std::string g = e.grad_of_output(states + o);
    if (g.empty()) continue;
    const std::string at = prefix + "gscan" + std::to_string(o);
    back.gather(at, g, out_dirs[o] ? back.k() : back.i(), 0);
    back.seed(body->outputs[states + o].name, at);
  }
  const auto grads = back.build(slices);
  if (grads.empty()) return;
  for (size_t j = 0; j < states; ++j) e.set_grad(j, grads[j]);
  for (size_t j = 0; j < m; ++j) {
    // Stacked in backward order k: slice t = k for a reversed input, T-1-k otherwise.
    std::string g = grads[states + j];
    if (!in_dirs[j])
      g = e.emit1("Slice", {g, e.constant(Tensor::from<int64_t>({-1}, {1})),
                            e.constant(Tensor::from<int64_t>({INT64_MIN}, {1})),
                            e.constant(Tensor::from<int64_t>({0}, {1})),
                            e.constant(Tensor::from<int64_t>({-1}, {1}))});
    const int64_t rank = rank_of(n.inputs[states + j]);
    const int64_t axis = in_axes[j] < 0 ? in_axes[j] + rank : in_axes[j];
    if (axis != 0) {  // [T, rest...] -> the input's order, T at `axis`
      std::vector<int64_t> perm;
      for (int64_t d = 1; d <= axis; ++d) perm.push_back(d);
      perm.push_back(0);
      for (int64_t d = axis + 1; d < rank; ++d) perm.push_back(d);
      g = e.emit1("Transpose", {g}, {{"perm", ints_attr(perm)}});
    }
    e.set_grad(states + j, g);
  }
}

}  // namespace

// The condition carries no gradient; the captured values do.
VOLT_REGISTER_GRADIENT_OF(if_, "If", ({}, true), if_rule);
static const GradientRuleRegistrar volt_gradient_registrar_scan{kOnnxDomain, "Scan", scan_rule,
                                                                Differentiable::all_and_captured()};
// M and the condition carry none; the loop-carried values and the captured values do.
static const GradientRuleRegistrar volt_gradient_registrar_loop{kOnnxDomain, "Loop", loop_rule,
                                                                Differentiable::from(2, true)};

}  // namespace volt
