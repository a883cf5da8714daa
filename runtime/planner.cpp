// Builds a Plan for one set of input types and shapes: kernel choice, shape inference,
// plan-time constant evaluation, and the arena layout by liveness.
#include <algorithm>
#include <climits>
#include <cstring>
#include <optional>
#include <span>
#include <sstream>

#include "runtime/contexts.hpp"
#include "runtime/memory_plan.hpp"
#include "runtime/omp_threads.hpp"
#include "runtime/plan.hpp"

namespace volt {

TypeShape TypeShape::of(const Value& v) {
  TypeShape t;
  if (v.is_tensor()) {
    t.dtype = v.tensor().dtype();
    t.shape = v.tensor().shape();
  } else if (v.is_csr()) {
    t.kind = ValueInfo::Kind::SparseTensor;
    t.dtype = v.csr().dtype();
    t.shape = v.csr().shape();
  } else if (v.is_sequence()) {
    t.kind = ValueInfo::Kind::Sequence;
    t.dtype = v.sequence_dtype();
    t.shape_known = true;
  } else {
    t.kind = ValueInfo::Kind::Optional;
  }
  return t;
}

void check_input_type_groups(const Node& node, std::span<const TypeShape* const> in_types) {
  const auto& groups = node.input_type_group;
  const size_t n = std::min(in_types.size(), groups.size());
  auto dtype = [&](size_t i) { return in_types[i] ? in_types[i]->dtype : DType::Undefined; };
  // (Pairs, not a table by group: nodes have a few inputs, and every new shape checks each.)
  for (size_t i = 1; i < n; ++i) {
    if (groups[i] < 0 || dtype(i) == DType::Undefined) continue;
    for (size_t first = 0; first < i; ++first) {
      if (groups[first] != groups[i] || dtype(first) == DType::Undefined) continue;
      if (dtype(first) != dtype(i))
        fail(ErrorCode::InvalidModel,
             node.describe() + ": inputs " + std::to_string(first) + " and " + std::to_string(i) +
                 " must have the same type (the op's schema says so), got " +
                 dtype_name(dtype(first)) + " and " + dtype_name(dtype(i)));
      break;  // (the first input of the group with a type; the others matched it)
    }
  }
}

KernelDevices kernel_devices(const CompiledGraph& cg, const Node& node) {
  if (!cg.on_accelerator(node)) return KernelDevices{{&cg.device, nullptr}, 1};
  return KernelDevices{{&node.device, &cg.device}, 2};
}

namespace {

// Plan-time evaluation is for small shape arithmetic; large constant subgraphs are folded once
// per session by the constant-folding pass instead of once per plan.
constexpr int64_t kFoldMaxElements = 1 << 16;
// What a node's memo keeps of its folded outputs (NodeMemo::folded).
using FoldedOutputs = std::vector<std::shared_ptr<const Value>>;

struct Choice {
  const KernelDef* def = nullptr;
  std::shared_ptr<const Kernel> kernel;
  std::optional<NodeInferContext> ctx;
  bool deferred = false;  // an input shape is only known at run time
  bool on_accelerator = false;
  // The constant inputs the kernel sees: the caller's, or host copies of device constants for
  // host kernels (`values` then points into `host_copies`).
  std::vector<Value> host_copies;
  std::vector<const Value*> host_values;
  std::span<const Value* const> values;
};

Choice choose_kernel(const CompiledGraph& cg, const Node& node,
                     std::span<const TypeShape* const> in_types,
                     std::span<const Value* const> in_values, int threads, bool shapes_vary,
                     NodeMemo* memo, const PlanStep* before) {
  check_input_type_groups(node, in_types);
  Choice c;
  // An input known only at run time (its shape, and maybe its dtype): choose then.
  for (const TypeShape* t : in_types)
    if (t && (!t->shape_known || t->dtype == DType::Undefined) &&
        t->kind == ValueInfo::Kind::Tensor) {
      c.deferred = true;
      return c;
    }
  std::string reasons;
  c.values = in_values;
  for (const std::string* device : kernel_devices(cg, node)) {
    c.on_accelerator = *device != cg.device;
    if (!c.on_accelerator && cg.on_accelerator(node)) {
      c.host_copies.resize(in_values.size());
      c.host_values.assign(in_values.begin(), in_values.end());
      for (size_t i = 0; i < in_values.size(); ++i)
        if (in_values[i] && in_values[i]->is_tensor() &&
            !in_values[i]->tensor().device().is_cpu()) {
          c.host_copies[i] = in_values[i]->tensor().to(Device{});
          c.host_values[i] = &c.host_copies[i];
        }
      c.values = c.host_values;
    }
    auto matching = [&] { return KernelRegistry::instance().candidates(node, *device); };
    std::vector<const KernelDef*> unkept;
    const std::vector<const KernelDef*>& defs =
        memo ? memo->definitions(*device, matching) : (unkept = matching());
    for (const KernelDef* def : defs) {
      if (!def->accepts(in_types) || (shapes_vary && def->shape_specific)) continue;
      // (The previous plan's kernel for the node where it has the same definition: no lookup.)
      auto kernel = before && before->def == def && before->kernel ? before->kernel
                    : memo ? memo->kernel(def, [&] { return def->create(node); })
                           : std::shared_ptr<const Kernel>(def->create(node));
      c.ctx.emplace(node, in_types, c.values, threads, shapes_vary, memo, cg.input_dims_open);
      try {
        kernel->infer(*c.ctx);
      } catch (const KernelUnsupported& u) {
        reasons += "; " + u.reason;
        c.ctx.reset();
        continue;
      } catch (const ShapeUnknown&) {
        c.deferred = true;
        c.def = def;
        c.ctx.reset();
        return c;
      }
      c.def = def;
      c.kernel = std::move(kernel);
      return c;
    }
  }
  std::string types;
  for (size_t i = 0; i < in_types.size(); ++i)
    types += std::string(i ? ", " : "") +
             (in_types[i] && in_types[i]->kind == ValueInfo::Kind::SparseTensor ? "sparse " : "") +
             (in_types[i] ? dtype_name(in_types[i]->dtype) : "-");
  fail(ErrorCode::NotImplemented, cg.source + ": " + node.describe() + ": no kernel on " +
                                      cg.kernel_device(node) + " for inputs (" + types + ")" +
                                      reasons);
}

int64_t total_elements(const NodeInferContext& ctx) {
  int64_t n = 0;
  for (const auto& t : ctx.outputs)
    if (t.kind == ValueInfo::Kind::Tensor) n += numel_of(t.shape);
  return n;
}

// Runs a kernel now, on heap buffers, to turn its outputs into constants.
std::vector<Value> evaluate_now(const CompiledGraph& cg, const Node& node, bool on_accelerator,
                                const Kernel& kernel, const NodeInferContext& ictx,
                                std::span<const Value* const> in_values, int threads) {
  std::vector<Value> outs(ictx.outputs.size());
  std::vector<Value*> slots(outs.size(), nullptr);
  for (size_t i = 0; i < outs.size(); ++i) {
    const TypeShape& t = ictx.outputs[i];
    if (t.kind == ValueInfo::Kind::Tensor && t.shape_known && t.dtype != DType::Undefined)
      outs[i] = on_accelerator ? Tensor::empty_on(cg.accelerator, t.dtype, t.shape)
                               : allocate_tensor(t.dtype, t.shape, t.dtype == DType::String);
    if (node.has_output(i)) slots[i] = &outs[i];
  }
  std::unique_ptr<char[]> scratch_mem;
  void* scratch = nullptr;
  if (ictx.scratch_bytes > 0) {
    scratch_mem.reset(new char[ictx.scratch_bytes + 64]);
    scratch = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(scratch_mem.get()) + 63) &
                                      ~uintptr_t{63});
  }
  NodeRunContext rctx(node, in_values, slots, nullptr, ictx.state.get(), scratch, threads);
  if (on_accelerator) {
    VOLT_CHECK(ictx.scratch_bytes == 0, Runtime,
               node.describe() + ": device kernels with scratch are not evaluated at plan time");
    rctx.place_on(cg.accelerator, nullptr);
  }
  kernel.run(rctx);
  return outs;
}

bool is_pod_tensor(const TypeShape& t) {
  return t.kind == ValueInfo::Kind::Tensor && t.shape_known && t.dtype != DType::String &&
         t.dtype != DType::Undefined;
}

// Whether two constant inputs hold the same value: the same buffer, or (small values computed
// at plan time, such as a Reshape's target shape) the same contents.
bool same_constant(const Value& a, const Value& b) {
  if (!a.is_tensor() || !b.is_tensor()) return false;
  const Tensor &x = a.tensor(), &y = b.tensor();
  if (x.dtype() != y.dtype() || x.shape() != y.shape() || !x.device().is_cpu() ||
      !y.device().is_cpu() || x.dtype() == DType::String)
    return false;
  if (x.raw() == y.raw()) return true;
  // A released weight's stand-in (is_released_weight) and the weight rebuilt are one value: the
  // steps that read the stand-in keep their own copies of it.
  if (!x.raw() || !y.raw()) return x.numel() > 0;
  constexpr size_t kComparedBytes = 256;
  return x.nbytes() <= kComparedBytes && std::memcmp(x.raw(), y.raw(), x.nbytes()) == 0;
}

// Whether value `id` is as it was in the previous plan (PlanInputs::previous): the same type, a
// constant in both or in neither, and as a constant the same value. Judged once per value, when
// it is planned: a node whose inputs all are plans as it did there.
bool value_as_before(const Plan& previous, const Plan& plan, int id) {
  const bool constant = plan.placement[id] == Placement::Constant,
             was_constant = previous.placement[id] == Placement::Constant;
  // (The same shared value: every weight and folded value a plan takes over from the one before.)
  if (constant && was_constant && plan.constants[id] == previous.constants[id]) return true;
  if (constant != was_constant || !same_type(plan.types[id], previous.types[id])) return false;
  return !constant || same_constant(*plan.constants[id], *previous.constants[id]);
}

bool all_as_before(const std::vector<char>& as_before, const std::vector<int>& ids) {
  for (const int id : ids)
    if (id >= 0 && !as_before[static_cast<size_t>(id)]) return false;
  return true;
}

// Whether every input of a node has the type it had in `types` (another plan's, by value id).
bool types_as_in(const std::vector<TypeShape>& types, const Plan& plan,
                 const std::vector<int>& ids) {
  for (const int id : ids)
    if (id >= 0 && !same_type(plan.types[id], types[static_cast<size_t>(id)])) return false;
  return true;
}

// The previous plan's step for this node, when its inputs are as before; null otherwise.
const PlanStep* reusable_step(const Plan& previous, const std::vector<int>& step_of_node,
                              const std::vector<char>& as_before, const std::vector<int>& ids,
                              int node_index) {
  const int at = step_of_node[static_cast<size_t>(node_index)];
  if (at < 0) return nullptr;
  const PlanStep& step = previous.steps[static_cast<size_t>(at)];
  if (!step.shapes_static || !step.kernel) return nullptr;
  return all_as_before(as_before, ids) ? &step : nullptr;
}

// Whether the previous plan folded this node (its outputs were constants there) and its
// inputs are as before: its outputs are then the same values (folding reads the inputs'
// types and constant values only).
bool refoldable(const Plan& previous, const std::vector<int>& step_of_node,
                const std::vector<char>& as_before, const std::vector<int>& ids,
                const std::vector<int>& outputs, int node_index) {
  if (step_of_node[static_cast<size_t>(node_index)] >= 0) return false;
  bool any = false;
  for (const int id : outputs) {
    if (id < 0) continue;
    if (previous.placement[id] != Placement::Constant) return false;
    any = true;
  }
  return any && all_as_before(as_before, ids);
}

// Whether every kernel the node may take on its device outputs a view of input 0
// (KernelDef::output_aliases_input: the Reshape family), for a step whose kernel is chosen at
// run time: its output then lives in input 0's buffer, which must outlive it (a view of an
// arena value read after the value's slot was reused would read another step's output).
bool always_views_input(const CompiledGraph& cg, const Node& node, NodeMemo* memo) {
  const std::string& device = cg.kernel_device(node);
  auto matching = [&] { return KernelRegistry::instance().candidates(node, device); };
  std::vector<const KernelDef*> unkept;
  const std::vector<const KernelDef*>& defs =
      memo ? memo->definitions(device, matching) : (unkept = matching());
  if (defs.empty()) return false;
  for (const KernelDef* def : defs)
    if (!def->output_aliases_input) return false;
  return true;
}

// The type value `id` had in both plans PlanInputs::open_axes_witnesses names, where it had one;
// null otherwise.
const TypeShape* witnessed_type(const PlanInputs& in, int id) {
  const auto& [a, b] = in.open_axes_witnesses;
  if (!a || !b || static_cast<size_t>(id) >= a->size() || static_cast<size_t>(id) >= b->size())
    return nullptr;
  const TypeShape &x = (*a)[static_cast<size_t>(id)], &y = (*b)[static_cast<size_t>(id)];
  if (x.kind != ValueInfo::Kind::Tensor || !x.shape_known || x.dtype == DType::Undefined ||
      !same_type(x, y))
    return nullptr;
  return &x;
}

}  // namespace

// Drops the data of initializers that every step reading them keeps its own copy of (weights
// reordered into a primitive's layout), leaving dtype and shape, as soon as the last node reading
// them is planned: the plan then holds each such weight once, and (with PlanInputs::release) the
// graph's owner may drop its copy before the next weight is packed, so that planning never holds
// all weights twice. Any other reader (a step whose kernel is chosen at run time, a subgraph's
// capture, the graph's outputs) keeps the initializer whole. Reads by nodes folded at plan time
// do not count: the run does not need them.
class CopiedInitializers {
 public:
  // A plan for several shapes drops none (the graph keeps its weights for the plans after it):
  // then this does nothing, not even count the readers.
  CopiedInitializers(const CompiledGraph& cg, const PlanInputs& in, Plan& plan)
      : cg_(cg), in_(in), plan_(plan), active_(!in.shapes_vary) {
    if (!active_) return;
    readers_.assign(cg.names.size(), 0);
    state_.assign(cg.names.size(), 0);
    for (const int node : cg.order)
      for (const int id : cg.node_inputs[node])
        if (id >= 0) ++readers_[id];
    for (const int id : cg.graph_outputs) state_[id] = kReadWhole;
  }

  // After a node is planned: `restorers` from its kernel (empty for folded or deferred nodes),
  // `step` whether it runs at run time.
  void planned(int node, bool step, std::vector<CopyOfInput>& restorers) {
    if (!active_) return;
    const auto& ids = cg_.node_inputs[node];
    for (size_t i = 0; i < ids.size(); ++i) {
      const int id = ids[i];
      if (id < 0) continue;
      if (step && i < restorers.size() && restorers[i].restore) {
        // The first copy's way back, or an exact one over a rounding one (CopyOfInput).
        auto kept = restore_.find(id);
        if (kept == restore_.end())
          restore_.emplace(id, std::move(restorers[i]));
        else if (!kept->second.exact && restorers[i].exact)
          kept->second = std::move(restorers[i]);
        state_[id] |= kCopied;
      } else if (step) {
        state_[id] |= kReadWhole;
      }
      if (--readers_[id] == 0 && state_[id] == kCopied) release(id);
    }
  }

 private:
  static constexpr char kCopied = 1, kReadWhole = 2;

  void release(int id) {
    if (plan_.placement[id] != Placement::Constant || !plan_.constants[id]->is_tensor() ||
        !cg_.graph->initializers.count(cg_.names[id]))
      return;
    const Tensor& t = plan_.constants[id]->tensor();
    plan_.constants[id] = std::make_shared<const Value>(
        Tensor::view(t.dtype(), t.shape(), nullptr, nullptr, t.device()));
    auto restore = std::move(restore_.at(id).restore);
    if (in_.release) in_.release(id, restore);
    plan_.released.emplace_back(id, std::move(restore));
  }

  const CompiledGraph& cg_;
  const PlanInputs& in_;
  Plan& plan_;
  bool active_;
  std::vector<int> readers_;  // by value id: nodes (input slots) not planned yet that read it
  std::vector<char> state_;   // by value id: kCopied | kReadWhole
  std::unordered_map<int, CopyOfInput> restore_;
};

std::unique_ptr<Plan> build_plan(const CompiledGraph& cg, const PlanInputs& in, int threads) {
  const ScopedOmpThreads scoped(threads);  // primitives are created for the session's threads
  auto plan = std::make_unique<Plan>();
  plan->graph = &cg;
  plan->threads = threads;
  plan->shape_generic = in.shapes_vary;
  plan->serves_open_axes = in.open_axes_witnesses[0] != nullptr;
  const size_t n = cg.names.size();
  const Graph& g = *cg.graph;
  plan->types.assign(n, TypeShape{});
  plan->constants.assign(n, nullptr);
  plan->placement.assign(n, Placement::None);
  plan->arena_offset.assign(n, -1);
  std::vector<char> known(n, 0);

  for (size_t id = 0; id < n && id < in.fed.size(); ++id)
    if (in.fed[id]) {
      plan->types[id] = in.types[id];
      plan->placement[id] = Placement::Input;
      known[id] = 1;
    }
  const Plan* previous = in.previous && in.previous->graph == &cg ? in.previous.get() : nullptr;
  // Room for a step per node, or for as many as the plan before took (a new shape of the same
  // graph folds about as many nodes): no reallocation to trim it after, which moved every step.
  plan->steps.reserve(previous ? previous->steps.size() + 8 : cg.order.size());
  // (The map holds the initializers compile_graph saw, in its order, unless a plan dropped some.)
  const bool all_initializers = g.initializers.size() == cg.initializer_ids.size();
  // Initializers that the previous plan held as constants, where the graph's are as they were
  // then: its values and types, by id, without a walk over the graph's map.
  bool every_initializer_taken = false;
  // (Released weights too, as their stand-ins: the graph's map no longer has them.)
  if (previous && in.initializers_as_in_previous && (all_initializers || in.restore_weight)) {
    every_initializer_taken = true;
    for (const int id : cg.initializer_ids) {
      if (id < 0 || known[id]) continue;
      if (previous->placement[id] != Placement::Constant) {
        every_initializer_taken = false;  // (fed there: from the graph's map below)
        continue;
      }
      plan->constants[id] = previous->constants[id];
      plan->types[id] = previous->types[id];
      plan->placement[id] = Placement::Constant;
      known[id] = 1;
    }
  }
  size_t initializer_index = 0;
  for (const auto& [name, tensor] : g.initializers) {
    if (every_initializer_taken) break;
    const int id = all_initializers ? cg.initializer_ids[initializer_index++] : cg.id(name);
    if (id < 0 || known[id]) continue;
    // (The previous plan's value where it holds the same tensor: a new shape does not wrap
    // every weight again.)
    const Value* was = previous ? previous->constants[id].get() : nullptr;
    if (was && was->is_tensor() && was->tensor().raw() == tensor.raw() && tensor.raw() &&
        was->tensor().dtype() == tensor.dtype() && was->tensor().shape() == tensor.shape())
      plan->constants[id] = previous->constants[id];
    else
      plan->constants[id] = std::make_shared<const Value>(tensor);
    plan->types[id] = TypeShape::of(tensor);
    plan->placement[id] = Placement::Constant;
    known[id] = 1;
  }
  // Weights an earlier plan released, which the graph's map no longer holds: the previous plan's
  // stand-ins, for restore_weight to bring back where a node planned afresh reads one.
  if (previous && in.restore_weight && !every_initializer_taken)
    for (const int id : cg.initializer_ids)
      if (id >= 0 && !known[id] && previous->placement[id] == Placement::Constant &&
          is_released_weight(previous->constants[id])) {
        plan->constants[id] = previous->constants[id];
        plan->types[id] = previous->types[id];
        plan->placement[id] = Placement::Constant;
        known[id] = 1;
      }
  for (const auto& [name, csr] : g.sparse_initializers) {  // where no dense copy has the name
    const int id = cg.id(name);
    if (id < 0 || known[id]) continue;
    plan->constants[id] = std::make_shared<const Value>(csr);
    plan->types[id] = TypeShape::of(*plan->constants[id]);
    plan->placement[id] = Placement::Constant;
    known[id] = 1;
  }

  // By value id, with a previous plan: value_as_before, judged as each value is planned.
  std::vector<char> as_before;
  auto judge = [&](int id) {
    if (previous && id >= 0)
      as_before[static_cast<size_t>(id)] = value_as_before(*previous, *plan, id);
  };
  if (previous) {
    as_before.assign(n, 0);
    for (size_t id = 0; id < n; ++id)
      if (known[id]) judge(static_cast<int>(id));
  }

  // By value id: the value does not depend on what the caller feeds (an initializer it does
  // not override, or what folds from such values alone). The first plan keeps the outputs of
  // nodes that fold from such values in the node's memo; later plans take them as they are, so
  // that a new input shape does not rebuild them (Constant nodes, weight arithmetic).
  std::vector<char> fixed(n, 0);
  for (size_t id = 0; id < n; ++id) fixed[id] = plan->placement[id] == Placement::Constant;

  CopiedInitializers copied(cg, in, *plan);
  std::vector<CopyOfInput> no_restorers;
  std::vector<int> step_of_node;  // by node index: its step in `previous`, or -1
  if (previous) {
    step_of_node.assign(g.nodes.size(), -1);
    for (size_t s = 0; s < previous->steps.size(); ++s)
      step_of_node[static_cast<size_t>(previous->steps[s].node)] = static_cast<int>(s);
  }
  // (Each node's, reused: a new shape plans every node.)
  std::vector<const TypeShape*> in_types;
  std::vector<const Value*> in_values;
  for (int node_index : cg.order) {
    const Node& node = g.nodes[node_index];
    const auto& ids = cg.node_inputs[node_index];
    bool from_fixed = true;
    for (const int id : ids)
      if (id >= 0 && !fixed[id]) from_fixed = false;
    NodeMemo* memo = cg.memos ? &cg.memos[node_index] : nullptr;
    if (from_fixed && memo)
      if (auto outs = std::static_pointer_cast<const FoldedOutputs>(memo->folded())) {
        const auto& out_ids = cg.node_outputs[node_index];
        for (size_t i = 0; i < out_ids.size(); ++i) {
          const int id = out_ids[i];
          if (id < 0) continue;
          plan->constants[id] = (*outs)[i];
          plan->types[id] = TypeShape::of(*(*outs)[i]);
          plan->placement[id] = Placement::Constant;
          fixed[id] = 1;
          judge(id);
        }
        copied.planned(node_index, false, no_restorers);
        continue;
      }
    in_types.assign(node.inputs.size(), nullptr);
    in_values.assign(node.inputs.size(), nullptr);
    bool inputs_constant = true;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const int id = ids[i];
      if (id < 0) continue;
      in_types[i] = &plan->types[id];
      if (plan->placement[id] == Placement::Constant)
        in_values[i] = plan->constants[id].get();
      else
        inputs_constant = false;
    }
    for (size_t i = node.inputs.size(); i < ids.size(); ++i)
      if (plan->placement[ids[i]] != Placement::Constant) inputs_constant = false;

    if (previous && refoldable(*previous, step_of_node, as_before, ids, cg.node_outputs[node_index],
                               node_index)) {
      for (const int id : cg.node_outputs[node_index]) {
        if (id < 0) continue;
        plan->constants[id] = previous->constants[id];
        plan->types[id] = previous->types[id];
        plan->placement[id] = Placement::Constant;
        fixed[id] = from_fixed;
        as_before[static_cast<size_t>(id)] = 1;
      }
      copied.planned(node_index, false, no_restorers);
      continue;
    }
    if (previous)
      if (const PlanStep* same =
              reusable_step(*previous, step_of_node, as_before, ids, node_index)) {
        plan->steps.push_back(*same);
        plan->steps.back().scratch_offset = -1;
        plan->steps.back().release.clear();
        for (const int id : same->outputs)
          if (id >= 0) {
            plan->types[id] = previous->types[id];
            as_before[static_cast<size_t>(id)] = 1;
          }
        copied.planned(node_index, true, no_restorers);
        continue;
      }
    // A released weight that this node, planned afresh, reads comes back (a step taken from the
    // previous plan needs none: PlanInputs::restore_weight).
    if (in.restore_weight)
      for (size_t i = 0; i < ids.size(); ++i) {
        const int id = ids[i];
        if (id < 0 || !is_released_weight(plan->constants[id])) continue;
        plan->constants[id] = in.restore_weight(id);
        judge(id);
        if (i < node.inputs.size()) in_values[i] = plan->constants[id].get();
      }
    const bool shapes_vary =
        in.shapes_vary && !(in.first_types && types_as_in(*in.first_types, *plan, ids));
    const int before = previous ? step_of_node[static_cast<size_t>(node_index)] : -1;
    Choice c = choose_kernel(cg, node, in_types, in_values, threads, shapes_vary, memo,
                             before >= 0 ? &previous->steps[static_cast<size_t>(before)] : nullptr);
    PlanStep step;
    step.node = node_index;
    step.def = c.def;
    step.inputs = std::span<const int>(ids).first(node.inputs.size());
    step.outputs = cg.node_outputs[node_index];
    step.on_accelerator = c.deferred ? cg.on_accelerator(node) : c.on_accelerator;
    step.output_is_view = c.def ? c.def->output_aliases_input : always_views_input(cg, node, memo);
    if (c.deferred) {
      step.shapes_static = false;
      for (const int id : step.outputs) {
        if (id < 0) continue;
        plan->types[id] = TypeShape{ValueInfo::Kind::Tensor, DType::Undefined, {}, false};
        if (const TypeShape* t = witnessed_type(in, id)) {
          plan->types[id] = *t;
          step.checks_planned_types = true;
        }
      }
    } else {
      NodeInferContext& ictx = *c.ctx;
      // Outputs computed from shapes alone, or from constants: no step at run time.
      // Device kernels are evaluated at plan time only to upload constants (fold_always).
      const bool values_given = ictx.has_values && ictx.all_known();
      const bool small = !c.on_accelerator && total_elements(ictx) <= kFoldMaxElements;
      const bool fold = c.def->foldable && ictx.all_known() &&
                        (values_given || (inputs_constant && (c.def->fold_always || small)));
      if (fold) {
        std::vector<Value> outs = values_given ? std::move(ictx.output_values)
                                               : evaluate_now(cg, node, c.on_accelerator, *c.kernel,
                                                              ictx, c.values, threads);
        const bool memoized = from_fixed && memo;  // (else no list of them is kept)
        auto kept = memoized ? std::make_shared<FoldedOutputs>(outs.size()) : nullptr;
        for (size_t i = 0; i < step.outputs.size(); ++i) {
          const int id = step.outputs[i];
          if (id < 0 && !memoized) continue;
          auto value = std::make_shared<const Value>(std::move(outs[i]));
          if (memoized) (*kept)[i] = value;
          if (id < 0) continue;
          plan->types[id] = TypeShape::of(*value);
          plan->constants[id] = std::move(value);
          plan->placement[id] = Placement::Constant;
          fixed[id] = from_fixed;
          judge(id);
        }
        if (memoized) memo->keep_folded(kept);
        copied.planned(node_index, false, no_restorers);
        continue;
      }
      step.kernel = std::move(c.kernel);
      step.state = std::move(ictx.state);
      step.scratch_bytes = ictx.scratch_bytes;
      step.reference = std::move(ictx.reference);
      step.shapes_static = ictx.all_known();
      // (A view whose shapes are known only at run time is not one: see output_views_input.)
      step.output_is_view = step.output_is_view || (ictx.output_is_view && step.shapes_static);
      step.inputs_in_output = std::move(ictx.inputs_in_output);
      for (size_t i = 0; i < step.outputs.size(); ++i)
        if (step.outputs[i] >= 0) plan->types[step.outputs[i]] = std::move(ictx.outputs[i]);
    }
    // (A plan for several shapes drops no weight: the graph keeps them for the plans after it,
    // even where a node is planned as for one shape.)
    copied.planned(node_index, true,
                   c.deferred || in.shapes_vary ? no_restorers : c.ctx->restorers);
    for (const int id : step.outputs) judge(id);
    if (!step.shapes_static) step.deferred_choices = std::make_shared<DeferredChoices>();
    plan->steps.push_back(std::move(step));
  }

  if (plan->steps.capacity() > plan->steps.size() + plan->steps.size() / 4 + 8)
    plan->steps.shrink_to_fit();  // (reserved for every node; folded ones took none)

  // --- liveness ------------------------------------------------------------------------------
  const int end = static_cast<int>(plan->steps.size());
  std::vector<int> last_use(n, -1), producer(n, -1);
  for (int s = 0; s < end; ++s) {
    const PlanStep& st = plan->steps[s];
    for (int id : cg.node_inputs[st.node])
      if (id >= 0) last_use[id] = s;
    for (int id : st.outputs)
      if (id >= 0) producer[id] = s;
  }
  for (int id : cg.graph_outputs) last_use[id] = end;

  // --- buffers: each arena value belongs to one buffer; views and in-place outputs share ------
  std::vector<BufferLifetime> buffers;
  std::vector<int> buffer_of(n, -1);
  // By buffer: the last step that reads one of its values (or writes one no step reads).
  std::vector<int> last_of_buffer;
  // By buffer: the buffer it lies in (a Concat's part computed in place: PlanStep::
  // inputs_in_output) and where, or -1. Only buffers without one are laid out; one that has
  // parts lives from the first part's step to the last read of any of them.
  std::vector<int> parent;
  std::vector<size_t> offset_in_parent;
  auto join = [&](int b, int id) {
    buffer_of[id] = b;
    const int last = last_use[id] < 0 ? producer[id] : last_use[id];
    for (int x = b; x >= 0; x = parent[x]) last_of_buffer[x] = std::max(last_of_buffer[x], last);
  };
  // Puts input buffers of a step in its output's buffer `out` where the kernel offered it and
  // the input is exactly one buffer of its own (not a part of another value, not already placed).
  auto place_parts = [&](const PlanStep& st, int out) {
    for (const auto& [i, at] : st.inputs_in_output) {
      const int id = static_cast<size_t>(i) < st.inputs.size() ? st.inputs[i] : -1;
      if (id < 0 || at % 64 != 0) continue;  // (kernels read their inputs 64-byte aligned)
      const int b = buffer_of[id];
      if (b < 0 || b == out || parent[b] >= 0 ||
          (plan->placement[id] != Placement::Arena && plan->placement[id] != Placement::View) ||
          buffers[b].bytes != checked_bytes(plan->types[id].dtype, numel_of(plan->types[id].shape)))
        continue;
      parent[b] = out;
      offset_in_parent[b] = at;
      buffers[out].first = std::min(buffers[out].first, buffers[b].first);
      last_of_buffer[out] = std::max(last_of_buffer[out], last_of_buffer[b]);
    }
  };
  for (int s = 0; s < end; ++s) {
    PlanStep& st = plan->steps[s];
    for (size_t j = 0; j < st.outputs.size(); ++j) {
      const int id = st.outputs[j];
      if (id < 0) continue;
      const TypeShape& t = plan->types[id];
      const bool alias = st.output_is_view && j == 0;
      if (alias) {
        plan->placement[id] = Placement::View;
        const int src = st.inputs.empty() ? -1 : st.inputs[0];
        if (src >= 0 && buffer_of[src] >= 0) join(buffer_of[src], id);
        continue;
      }
      // Device values come from the device's caching allocator, not the host arena.
      if (!st.shapes_static || !is_pod_tensor(t) || cg.is_graph_output[id] || st.on_accelerator) {
        plan->placement[id] = Placement::Heap;
        continue;
      }
      plan->placement[id] = Placement::Arena;
      const size_t bytes = checked_bytes(t.dtype, numel_of(t.shape));
      if (st.def && st.def->inplace_input >= 0 && j == 0 &&
          static_cast<size_t>(st.def->inplace_input) < st.inputs.size()) {
        const int src = st.inputs[st.def->inplace_input];
        if (src >= 0 && buffer_of[src] >= 0 && plan->placement[src] == Placement::Arena &&
            buffers[buffer_of[src]].bytes == bytes && last_of_buffer[buffer_of[src]] <= s &&
            parent[buffer_of[src]] < 0) {  // (a part of another value is not written over)
          join(buffer_of[src], id);
          continue;
        }
      }
      buffer_of[id] = static_cast<int>(buffers.size());
      buffers.push_back({bytes, s, s});
      last_of_buffer.push_back(-1);
      parent.push_back(-1);
      offset_in_parent.push_back(0);
      join(buffer_of[id], id);
      if (j == 0) place_parts(st, buffer_of[id]);
    }
  }
  for (size_t b = 0; b < buffers.size(); ++b)
    buffers[b].last = std::max(buffers[b].first, last_of_buffer[b]);
  std::vector<int> scratch_buffer(end, -1);
  for (int s = 0; s < end; ++s) {
    if (plan->steps[s].on_accelerator) plan->uses_accelerator = true;
    if (plan->steps[s].scratch_bytes > 0 && !plan->steps[s].on_accelerator) {
      scratch_buffer[s] = static_cast<int>(buffers.size());
      buffers.push_back({plan->steps[s].scratch_bytes, s, s});
    }
  }
  parent.resize(buffers.size(), -1);
  offset_in_parent.resize(buffers.size(), 0);
  std::vector<BufferLifetime> laid_out;  // the buffers in no other
  std::vector<int> laid_out_as(buffers.size(), -1);
  for (size_t b = 0; b < buffers.size(); ++b)
    if (parent[b] < 0) {
      laid_out_as[b] = static_cast<int>(laid_out.size());
      laid_out.push_back(buffers[b]);
    }
  ArenaLayout own_layout;
  if (in.shapes_vary)
    plan->arena_layout =
        layout_arena_for_shapes(laid_out, previous ? previous->arena_layout : nullptr);
  else
    own_layout = layout_arena(laid_out);
  const ArenaLayout& layout = plan->arena_layout ? plan->arena_layout->layout : own_layout;
  auto offset_of = [&](int b) {
    int64_t at = 0;
    for (; parent[b] >= 0; b = parent[b]) at += static_cast<int64_t>(offset_in_parent[b]);
    return layout.offsets[laid_out_as[b]] + at;
  };
  plan->arena_bytes = layout.total_bytes;
  for (size_t id = 0; id < n; ++id)
    if (buffer_of[id] >= 0 && plan->placement[id] == Placement::Arena)
      plan->arena_offset[id] = offset_of(buffer_of[id]);
  for (int s = 0; s < end; ++s)
    if (scratch_buffer[s] >= 0) plan->steps[s].scratch_offset = offset_of(scratch_buffer[s]);

  // Heap values (and views of them) are dropped after their last use to keep peak memory low.
  for (size_t id = 0; id < n; ++id) {
    const Placement p = plan->placement[id];
    if ((p != Placement::Heap && p != Placement::View) || cg.is_graph_output[id] ||
        producer[id] < 0)
      continue;
    const int at = last_use[id] >= 0 ? last_use[id] : producer[id];
    plan->steps[at].release.push_back(static_cast<int>(id));
  }
  return plan;
}

std::string Plan::describe() const {
  static const char* kPlacement[] = {"none", "constant", "input", "arena", "heap", "view"};
  std::ostringstream out;
  out << "plan: " << steps.size() << " steps, arena " << arena_bytes << " bytes\n";
  for (size_t s = 0; s < steps.size(); ++s) {
    const PlanStep& st = steps[s];
    out << "  [" << s << "] " << graph->graph->nodes[st.node].describe()
        << (st.shapes_static ? "" : " (shapes at run time)") << "\n";
    for (size_t j = 0; j < st.outputs.size(); ++j) {
      const int id = st.outputs[j];
      if (id < 0) continue;
      out << "      -> " << graph->names[id] << " " << dtype_name(types[id].dtype)
          << (types[id].shape_known ? shape_str(types[id].shape) : "[?]") << " "
          << kPlacement[static_cast<int>(placement[id])];
      if (arena_offset[id] >= 0) out << " @" << arena_offset[id];
      out << "\n";
    }
    if (st.scratch_bytes)
      out << "      scratch " << st.scratch_bytes << " @" << st.scratch_offset << "\n";
    for (int id : st.release) out << "      frees " << graph->names[id] << "\n";
  }
  return out.str();
}

}  // namespace volt
