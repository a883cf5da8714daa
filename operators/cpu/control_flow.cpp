// Control flow: If, Loop, Scan (opset 8 and 9+), SequenceMap. Bodies run through make_subgraph
// with their own cached plans; values they read from enclosing graphs come from the run context.
#include "operators/common/dispatch.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/registry.hpp"
#include "runtime/run_control.hpp"

namespace volt {
namespace {

void all_outputs_unknown(InferContext& ctx) {
  for (size_t i = 0; i < ctx.output_count(); ++i) ctx.set_output_unknown(i, DType::Undefined);
}

bool truth_of(const Tensor& t, const Node& node) {
  VOLT_CHECK(t.numel() == 1, InvalidArgument,
             node.describe() + ": the condition must have one element");
  return dispatch_numeric(t.dtype(), [&](auto tag) -> bool {
    using T = typename decltype(tag)::type;
    return static_cast<typename Compute<T>::type>(static_cast<const T*>(t.raw())[0]) != 0;
  });
}

// Stacks equally shaped tensors along a new axis (0 for Loop, any for Scan).
Tensor stack(const std::vector<Tensor>& items, int64_t axis, const Node& node) {
  const Shape& s = items.at(0).shape();
  for (const Tensor& t : items)
    VOLT_CHECK(t.shape() == s && t.dtype() == items[0].dtype(), InvalidArgument,
               node.describe() + ": per-iteration outputs differ in shape: " +
                   shape_str(t.shape()) + " vs " + shape_str(s));
  Shape out = s;
  out.insert(out.begin() + axis, static_cast<int64_t>(items.size()));
  Tensor y = Tensor::empty(items[0].dtype(), out);
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= s[d];
  const int64_t piece = outer ? items[0].numel() / outer : 0,
                k = static_cast<int64_t>(items.size());
  dispatch_any(y.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* dst = static_cast<T*>(y.raw());
    for (int64_t j = 0; j < k; ++j) {
      const T* src = static_cast<const T*>(items[j].raw());
      for (int64_t o = 0; o < outer; ++o)
        std::copy(src + o * piece, src + (o + 1) * piece, dst + (o * k + j) * piece);
    }
  });
  return y;
}

// Slice i along `axis`, with that axis removed.
Tensor slice_at(const Tensor& in, int64_t axis, int64_t i) {
  Shape s = in.shape();
  const int64_t n = s[axis];
  s.erase(s.begin() + axis);
  Tensor out = Tensor::empty(in.dtype(), s);
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= in.dim(d);
  const int64_t inner = outer && n ? in.numel() / outer / n : 0;
  dispatch_any(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = static_cast<const T*>(in.raw());
    T* dst = static_cast<T*>(out.raw());
    for (int64_t o = 0; o < outer; ++o)
      std::copy(src + (o * n + i) * inner, src + (o * n + i + 1) * inner, dst + o * inner);
  });
  return out;
}

class If final : public Kernel {
 public:
  explicit If(const Node& n)
      : then_(make_subgraph(n.attr_graph("then_branch"), n)),
        else_(make_subgraph(n.attr_graph("else_branch"), n)) {}
  void infer(InferContext& ctx) const override { all_outputs_unknown(ctx); }
  void run(RunContext& ctx) const override {
    const Subgraph& branch = truth_of(ctx.input(0), ctx.node()) ? *then_ : *else_;
    std::vector<Value> outs = branch.run({}, ctx);
    VOLT_CHECK(outs.size() >= ctx.output_count(), InvalidModel,
               ctx.node().describe() + ": the branch has fewer outputs than the node");
    for (size_t i = 0; i < ctx.output_count(); ++i) ctx.set_output(i, std::move(outs[i]));
  }

 private:
  std::unique_ptr<Subgraph> then_, else_;
};

// Holds, for the duration of a Loop, the memory its stacked scan outputs will take (the items
// collected count as they are allocated), so a trip count of 2^62 is an error at once.
class ScanReservation {
 public:
  void take(size_t per_iteration, int64_t trips, const Node& node) {
    const RunControl* run = current_run_control();
    if (!run || trips <= 0 || per_iteration == 0) return;
    const size_t limit = run->budget()->limit();
    VOLT_CHECK(static_cast<uint64_t>(trips) <= limit / per_iteration, OutOfMemory,
               node.describe() + ": " + std::to_string(trips) + " iterations of " +
                   std::to_string(per_iteration) +
                   " bytes of scan outputs would pass the run's memory limit of " +
                   std::to_string(limit >> 20) + " MiB");
    bytes_ = per_iteration * static_cast<size_t>(trips);
    run->budget()->reserve(bytes_, "the Loop's scan outputs");
    budget_ = run->budget();
  }
  ~ScanReservation() {
    if (budget_) budget_->release(bytes_);
  }

 private:
  std::shared_ptr<MemoryBudget> budget_;
  size_t bytes_ = 0;
};

// A Tensor's bookkeeping beside its data, counted per collected scan item.
constexpr size_t kItemOverhead = 128;

class Loop final : public Kernel {
 public:
  explicit Loop(const Node& n) : body_(make_subgraph(n.attr_graph("body"), n)) {}
  void infer(InferContext& ctx) const override { all_outputs_unknown(ctx); }
  void run(RunContext& ctx) const override {
    const Node& node = ctx.node();
    const bool has_max = ctx.has_input(0), has_cond = ctx.has_input(1);
    const int64_t max_trips = has_max ? to_int64_vector(ctx.input(0), node, "M")[0] : 0;
    bool cond = has_cond ? truth_of(ctx.input(1), node) : true;
    const size_t n_carried = ctx.input_count() - 2;
    VOLT_CHECK(
        body_->output_count() >= 1 + n_carried, InvalidModel,
        node.describe() + ": the body must return the condition and every loop-carried value");
    const size_t n_scan = body_->output_count() - 1 - n_carried;
    std::vector<Value> carried;
    for (size_t i = 0; i < n_carried; ++i) carried.push_back(ctx.input_value(2 + i));
    std::vector<std::vector<Tensor>> scans(n_scan);
    ScanReservation reserved;
    for (int64_t iter = 0; (!has_max || iter < max_trips) && cond; ++iter) {
      check_run_interrupted();
      std::vector<Value> in;
      in.push_back(Tensor::scalar<int64_t>(iter));
      in.push_back(Tensor::scalar<bool>(cond));
      for (auto& v : carried) in.push_back(v);
      std::vector<Value> out = body_->run(in, ctx);
      cond = truth_of(out[0].tensor(), node);
      for (size_t i = 0; i < n_carried; ++i) carried[i] = std::move(out[1 + i]);
      for (size_t k = 0; k < n_scan; ++k) scans[k].push_back(out[1 + n_carried + k].tensor());
      // The stacked scan outputs will need trips × one iteration's bytes: with a known trip
      // count, refuse a run that cannot fit before collecting them one by one.
      if (iter == 0 && has_max && n_scan > 0) {
        size_t per_iteration = 0;
        for (size_t k = 0; k < n_scan; ++k) per_iteration += scans[k][0].nbytes() + kItemOverhead;
        reserved.take(per_iteration, max_trips, node);
      }
    }
    for (size_t i = 0; i < n_carried; ++i) ctx.set_output(i, carried[i]);
    for (size_t k = 0; k < n_scan; ++k)
      ctx.set_output(n_carried + k, scans[k].empty() ? Tensor::empty(DType::Float, {0})
                                                     : stack(scans[k], 0, node));
  }

 private:
  std::unique_ptr<Subgraph> body_;
};

class Scan final : public Kernel {
 public:
  explicit Scan(const Node& n)
      : body_(make_subgraph(n.attr_graph("body"), n)),
        batched_(n.opset < 9),
        num_scan_inputs_(n.attr_int("num_scan_inputs")),
        in_axes_(n.attr_ints("scan_input_axes")),
        in_dirs_(n.attr_ints(n.opset < 9 ? "directions" : "scan_input_directions")),
        out_axes_(n.attr_ints("scan_output_axes")),
        out_dirs_(n.attr_ints("scan_output_directions")) {}
  void infer(InferContext& ctx) const override { all_outputs_unknown(ctx); }

  void run(RunContext& ctx) const override {
    const Node& node = ctx.node();
    const size_t first = batched_ ? 1 : 0;  // opset 8 starts with sequence_lens
    const size_t n_inputs = ctx.input_count() - first;
    const size_t m = static_cast<size_t>(num_scan_inputs_), n_state = n_inputs - m;
    std::vector<Tensor> states, scans;
    for (size_t i = 0; i < n_state; ++i) states.push_back(ctx.input(first + i));
    for (size_t i = 0; i < m; ++i) scans.push_back(ctx.input(first + n_state + i));
    if (!batched_) {
      auto outs = scan_once(states, scans, ctx);
      for (size_t i = 0; i < outs.size(); ++i) ctx.set_output(i, outs[i]);
      return;
    }
    // Opset 8: axis 0 of every input is a batch; scan each batch entry and stack the results.
    VOLT_CHECK(n_state + m > 0, InvalidModel, node.describe() + ": Scan has no inputs");
    const Tensor& first_input = n_state ? states[0] : scans[0];
    VOLT_CHECK(first_input.rank() >= 1, InvalidArgument,
               node.describe() + ": opset-8 Scan inputs need a batch axis");
    const int64_t batch = first_input.dim(0);
    for (const auto* group : {&states, &scans})
      for (const Tensor& t : *group)
        VOLT_CHECK(t.rank() >= 1 && t.dim(0) == batch, InvalidArgument,
                   node.describe() + ": every input of an opset-8 Scan has batch " +
                       std::to_string(batch) + " on axis 0, not " + shape_str(t.shape()));
    std::vector<std::vector<Tensor>> per_output;
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<Tensor> s, x;
      for (auto& t : states) s.push_back(slice_at(t, 0, b));
      for (auto& t : scans) x.push_back(slice_at(t, 0, b));
      auto outs = scan_once(s, x, ctx);
      per_output.resize(outs.size());
      for (size_t i = 0; i < outs.size(); ++i) per_output[i].push_back(outs[i]);
    }
    for (size_t i = 0; i < per_output.size(); ++i) ctx.set_output(i, stack(per_output[i], 0, node));
  }

 private:
  std::vector<Tensor> scan_once(std::vector<Tensor> states, const std::vector<Tensor>& scans,
                                const RunContext& ctx) const {
    const Node& node = ctx.node();
    const size_t m = scans.size(), n_state = states.size();
    std::vector<int64_t> axes(m, 0);
    int64_t steps = -1;
    for (size_t i = 0; i < m; ++i) {
      if (!in_axes_.empty())
        axes[i] = normalize_axis(in_axes_[i], static_cast<int64_t>(scans[i].rank()), node);
      const int64_t len = scans[i].dim(axes[i]);
      VOLT_CHECK(steps < 0 || len == steps, InvalidArgument,
                 node.describe() + ": scan inputs differ in sequence length");
      steps = len;
    }
    const size_t n_out = body_->output_count() - n_state;
    std::vector<std::vector<Tensor>> collected(n_out);
    for (int64_t t = 0; t < std::max<int64_t>(steps, 0); ++t) {
      check_run_interrupted();
      std::vector<Value> in(states.begin(), states.end());
      for (size_t i = 0; i < m; ++i) {
        const bool reverse = i < in_dirs_.size() && in_dirs_[i] == 1;
        in.push_back(slice_at(scans[i], axes[i], reverse ? steps - 1 - t : t));
      }
      std::vector<Value> out = body_->run(in, ctx);
      for (size_t i = 0; i < n_state; ++i) states[i] = out[i].tensor();
      for (size_t k = 0; k < n_out; ++k) collected[k].push_back(out[n_state + k].tensor());
    }
    std::vector<Tensor> result = states;
    for (size_t k = 0; k < n_out; ++k) {
      auto& items = collected[k];
      VOLT_CHECK(!items.empty(), InvalidArgument,
                 node.describe() + ": cannot scan an empty sequence");
      if (k < out_dirs_.size() && out_dirs_[k] == 1) std::reverse(items.begin(), items.end());
      const int64_t axis =
          k < out_axes_.size()
              ? normalize_axis(out_axes_[k], static_cast<int64_t>(items[0].rank()) + 1, node)
              : 0;
      result.push_back(stack(items, axis, node));
    }
    return result;
  }

  std::unique_ptr<Subgraph> body_;
  bool batched_;
  int64_t num_scan_inputs_;
  std::vector<int64_t> in_axes_, in_dirs_, out_axes_, out_dirs_;
};

class SequenceMap final : public Kernel {
 public:
  explicit SequenceMap(const Node& n) : body_(make_subgraph(n.attr_graph("body"), n)) {}
  void infer(InferContext& ctx) const override {
    for (size_t i = 0; i < ctx.output_count(); ++i)
      ctx.set_output(i, TypeShape{ValueInfo::Kind::Sequence, DType::Undefined, {}, true});
  }
  void run(RunContext& ctx) const override {
    const Value& seq = ctx.input_value(0);
    VOLT_CHECK(seq.is_sequence(), InvalidArgument,
               ctx.node().describe() + ": input 0 must be a sequence");
    const size_t n = seq.sequence_items().size();
    std::vector<std::vector<Tensor>> outs(ctx.output_count());
    for (size_t i = 0; i < n; ++i) {
      check_run_interrupted();
      std::vector<Value> in{seq.sequence_items()[i]};
      for (size_t k = 1; k < ctx.input_count(); ++k) {
        const Value& extra = ctx.input_value(k);
        if (extra.is_sequence()) {
          VOLT_CHECK(extra.sequence_items().size() == n, InvalidArgument,
                     ctx.node().describe() + ": sequences differ in length");
          in.push_back(extra.sequence_items()[i]);
        } else {
          in.push_back(extra);
        }
      }
      std::vector<Value> r = body_->run(in, ctx);
      for (size_t k = 0; k < outs.size(); ++k) outs[k].push_back(r[k].tensor());
    }
    for (size_t k = 0; k < outs.size(); ++k) {
      const DType dt = outs[k].empty() ? DType::Float : outs[k][0].dtype();
      ctx.set_output(k, Value::sequence(std::move(outs[k]), dt));
    }
  }

 private:
  std::unique_ptr<Subgraph> body_;
};

}  // namespace

VOLT_REGISTER_KERNEL(if_op, {.op = "If", .foldable = false, .create = make_kernel<If>});
VOLT_REGISTER_KERNEL(loop, {.op = "Loop", .foldable = false, .create = make_kernel<Loop>});
VOLT_REGISTER_KERNEL(scan,
                     {.op = "Scan", .since = 8, .foldable = false, .create = make_kernel<Scan>});
VOLT_REGISTER_KERNEL(sequence_map, {.op = "SequenceMap",
                                    .since = 17,
                                    .foldable = false,
                                    .create = make_kernel<SequenceMap>});

}  // namespace volt
