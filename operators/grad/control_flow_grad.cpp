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
    if (seed.empty()) continue;  // the seeds are the outer graph's values, which branches see
    if (req.y.empty()) {
      req.y = forward->outputs[i].name;
      req.seed = seed;
    } else {
      req.also.emplace_back(forward->outputs[i].name, seed);
    }
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
  for (const char* key : {"then_branch", "else_branch"}) {
    Attribute a;
    a.type = Attribute::Type::Graph;
    a.g = backward_branch(e, key, wanted);
    attrs[key] = a;
  }
  const auto grads = e.emit("If", {e.input(0)}, std::move(attrs), wanted.size());
  for (size_t j = 0; j < wanted.size(); ++j) e.add_grad(wanted[j], grads[j]);
}

ValueInfo named(const std::string& name) {
  ValueInfo v;
  v.name = name;
  return v;
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
  std::vector<std::string> wanted;
  for (const auto& c : e.captures())
    if (e.needs_grad_of(c)) wanted.push_back(c);

  // The recording loop: the forward again, with each iteration's carried inputs (and its
  // number, so that an empty loop still says how many iterations it ran) stacked.
  auto record = std::make_shared<Graph>(*body);
  std::vector<std::string> extra{body->inputs[0].name};
  for (size_t j = 0; j < carried; ++j) extra.push_back(body->inputs[2 + j].name);
  for (size_t j = 0; j < extra.size(); ++j) {
    const std::string out = prefix + "record" + std::to_string(j);
    record->nodes.push_back(make_node(out, "Identity", {extra[j]}, {out}));
    record->outputs.push_back(named(out));
  }
  Attribute rb;
  rb.type = Attribute::Type::Graph;
  rb.g = record;
  const auto recorded = e.emit("Loop", n.inputs, {{"body", rb}}, carried + scans + extra.size());
  const std::string trips = e.emit1("Size", {recorded[carried + scans]});  // the stacked numbers

  // The backward body, at backward iteration k: forward iteration i = trips - 1 - k.
  auto back = std::make_shared<Graph>(*body);
  back->inputs = {named(prefix + "k"), named(prefix + "cond")};
  back->outputs.clear();
  std::vector<Node> prologue;
  back->initializers[prefix + "one"] = Tensor::scalar(int64_t{1});
  back->initializers[prefix + "true"] = Tensor::scalar(true);
  const std::string i = prefix + "i", last = prefix + "last";
  prologue.push_back(make_node(last, "Sub", {trips, prefix + "one"}, {last}));
  prologue.push_back(make_node(i, "Sub", {last, prefix + "k"}, {i}));
  prologue.push_back(make_node(prefix + "iteration", "Identity", {i}, {body->inputs[0].name}));
  back->initializers[body->inputs[1].name] = Tensor::scalar(true);  // cond_in held true
  for (size_t j = 0; j < carried; ++j)
    prologue.push_back(make_node(prefix + "v_in" + std::to_string(j), "Gather",
                                 {recorded[carried + scans + 1 + j], i},
                                 {body->inputs[2 + j].name}));
  // The gradients the backward loop carries: the carried values' (from the last iteration
  // back), then the captured values' sums.
  GradientRequest req;
  auto seed = [&](const std::string& y, const std::string& g) {
    if (req.y.empty()) {
      req.y = y;
      req.seed = g;
    } else {
      req.also.emplace_back(y, g);
    }
  };
  std::vector<std::string> initial;
  for (size_t j = 0; j < carried; ++j) {
    const std::string gv = prefix + "gv" + std::to_string(j);
    back->inputs.push_back(named(gv));
    const std::string g = e.grad_of_output(j);
    initial.push_back(g.empty() ? e.emit1("ZerosLike", {e.output(j)}, {}, kVoltDomain) : g);
    seed(body->outputs[1 + j].name, gv);
  }
  for (size_t m = 0; m < wanted.size(); ++m) {
    back->inputs.push_back(named(prefix + "gc" + std::to_string(m)));
    initial.push_back(e.emit1("ZerosLike", {wanted[m]}, {}, kVoltDomain));
  }
  for (size_t s = 0; s < scans; ++s) {
    const std::string g = e.grad_of_output(carried + s);
    if (g.empty()) continue;
    const std::string at = prefix + "gscan" + std::to_string(s);
    prologue.push_back(make_node(at, "Gather", {g, i}, {at}));
    seed(body->outputs[1 + carried + s].name, at);
  }
  back->nodes.insert(back->nodes.begin(), prologue.begin(), prologue.end());
  if (req.y.empty()) return;  // no gradient reached the loop's outputs
  for (size_t j = 0; j < carried; ++j) req.wrt.push_back(body->inputs[2 + j].name);
  req.wrt.insert(req.wrt.end(), wanted.begin(), wanted.end());
  req.prefix = prefix + "body/";
  const std::vector<std::string> grads = e.differentiate(*back, req);
  const std::string cond_out = prefix + "cond_out";
  back->nodes.push_back(make_node(cond_out, "Identity", {prefix + "true"}, {cond_out}));
  back->outputs.push_back(named(cond_out));
  for (size_t j = 0; j < carried; ++j) {
    const std::string out = prefix + "gv_next" + std::to_string(j);
    back->nodes.push_back(make_node(out, "Identity", {grads[j]}, {out}));
    back->outputs.push_back(named(out));
  }
  for (size_t m = 0; m < wanted.size(); ++m) {
    const std::string out = prefix + "gc_next" + std::to_string(m);
    back->nodes.push_back(
        make_node(out, "Add", {prefix + "gc" + std::to_string(m), grads[carried + m]}, {out}));
    back->outputs.push_back(named(out));
  }
  Attribute bb;
  bb.type = Attribute::Type::Graph;
  bb.g = back;
  std::vector<std::string> ins{trips, ""};
  ins.insert(ins.end(), initial.begin(), initial.end());
  const auto outs = e.emit("Loop", ins, {{"body", bb}}, carried + wanted.size());
  for (size_t j = 0; j < carried; ++j) e.set_grad(2 + j, outs[j]);
  for (size_t m = 0; m < wanted.size(); ++m) e.add_grad(wanted[m], outs[carried + m]);
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
  std::vector<std::string> wanted;
  for (const auto& c : e.captures())
    if (e.needs_grad_of(c)) wanted.push_back(c);

  // The recording Scan: each iteration's states, stacked forward along axis 0.
  auto record = std::make_shared<Graph>(*body);
  for (size_t j = 0; j < states; ++j) {
    const std::string out = prefix + "record" + std::to_string(j);
    record->nodes.push_back(make_node(out, "Identity", {body->inputs[j].name}, {out}));
    record->outputs.push_back(named(out));
  }
  std::map<std::string, Attribute> rattrs = n.attributes;
  Attribute rb;
  rb.type = Attribute::Type::Graph;
  rb.g = record;
  rattrs["body"] = rb;
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

  auto back = std::make_shared<Graph>(*body);
  back->inputs = {named(prefix + "k"), named(prefix + "cond")};
  back->outputs.clear();
  std::vector<Node> prologue;
  back->initializers[prefix + "one"] = Tensor::scalar(int64_t{1});
  back->initializers[prefix + "true"] = Tensor::scalar(true);
  const std::string i = prefix + "i", k = prefix + "k", last = prefix + "last";
  prologue.push_back(make_node(last, "Sub", {trips, prefix + "one"}, {last}));
  prologue.push_back(make_node(i, "Sub", {last, k}, {i}));
  auto gather = [&](const std::string& out, const std::string& from, const std::string& at,
                    int64_t axis) {
    Node g = make_node(out, "Gather", {from, at}, {out});
    g.attributes["axis"] = int_attr(axis);
    prologue.push_back(std::move(g));
  };
  for (size_t j = 0; j < states; ++j)
    gather(body->inputs[j].name + "", recorded[states + k_out + j], i, 0);
  for (size_t j = 0; j < m; ++j)  // forward iteration i read slice i, or T-1-i (= k) reversed
    gather(body->inputs[states + j].name, n.inputs[states + j], in_dirs[j] ? k : i, in_axes[j]);
  GradientRequest req;
  auto seed = [&](const std::string& y, const std::string& g) {
    if (req.y.empty()) {
      req.y = y;
      req.seed = g;
    } else {
      req.also.emplace_back(y, g);
    }
  };
  std::vector<std::string> initial;
  for (size_t j = 0; j < states; ++j) {
    const std::string gv = prefix + "gv" + std::to_string(j);
    back->inputs.push_back(named(gv));
    const std::string g = e.grad_of_output(j);
    initial.push_back(g.empty() ? e.emit1("ZerosLike", {e.output(j)}, {}, kVoltDomain) : g);
    seed(body->outputs[j].name, gv);
  }
  for (size_t c = 0; c < wanted.size(); ++c) {
    back->inputs.push_back(named(prefix + "gc" + std::to_string(c)));
    initial.push_back(e.emit1("ZerosLike", {wanted[c]}, {}, kVoltDomain));
  }
  for (size_t o = 0; o < k_out; ++o) {
    const std::string g = e.grad_of_output(states + o);
    if (g.empty()) continue;
    const std::string at = prefix + "gscan" + std::to_string(o);
    gather(at, g, out_dirs[o] ? k : i, 0);
    seed(body->outputs[states + o].name, at);
  }
  back->nodes.insert(back->nodes.begin(), prologue.begin(), prologue.end());
  if (req.y.empty()) return;
  for (size_t j = 0; j < states + m; ++j) req.wrt.push_back(body->inputs[j].name);
  req.wrt.insert(req.wrt.end(), wanted.begin(), wanted.end());
  req.prefix = prefix + "body/";
  const std::vector<std::string> grads = e.differentiate(*back, req);
  const std::string cond_out = prefix + "cond_out";
  back->nodes.push_back(make_node(cond_out, "Identity", {prefix + "true"}, {cond_out}));
  back->outputs.push_back(named(cond_out));
  auto output = [&](const std::string& name, Node node) {
    back->nodes.push_back(std::move(node));
    back->outputs.push_back(named(name));
  };
  for (size_t j = 0; j < states; ++j) {
    const std::string out = prefix + "gv_next" + std::to_string(j);
    output(out, make_node(out, "Identity", {grads[j]}, {out}));
  }
  for (size_t c = 0; c < wanted.size(); ++c) {
    const std::string out = prefix + "gc_next" + std::to_string(c);
    output(out, make_node(out, "Add", {prefix + "gc" + std::to_string(c), grads[states + m + c]},
                          {out}));
  }
  for (size_t j = 0; j < m; ++j) {  // each iteration's slice gradient, a scan output
    const std::string out = prefix + "gslice" + std::to_string(j);
    output(out, make_node(out, "Identity", {grads[states + j]}, {out}));
  }
  Attribute bb;
  bb.type = Attribute::Type::Graph;
  bb.g = back;
  std::vector<std::string> ins{trips, ""};
  ins.insert(ins.end(), initial.begin(), initial.end());
  const auto outs = e.emit("Loop", ins, {{"body", bb}}, states + wanted.size() + m);
  for (size_t j = 0; j < states; ++j) e.set_grad(j, outs[j]);
  for (size_t c = 0; c < wanted.size(); ++c) e.add_grad(wanted[c], outs[states + c]);
  for (size_t j = 0; j < m; ++j) {
    // Stacked in backward order k: slice t = k for a reversed input, T-1-k otherwise.
    std::string g = outs[states + wanted.size() + j];
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
