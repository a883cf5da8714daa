#include "runtime/executor.hpp"

#include "runtime/omp_threads.hpp"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>

#include "runtime/buffer_pool.hpp"
#include "runtime/contexts.hpp"
#include "runtime/device.hpp"
#include "runtime/run_control.hpp"

namespace volt {
namespace {

// A run's bookkeeping vectors, reused: each thread keeps a few (runs nest, a Loop body inside
// its node), so that a run of a small graph, such as a loop body run once per iteration, does
// not go to the allocator for them. (Its values are dropped when the run ends; only the
// capacity stays.)
struct RunScratch {
  std::vector<Value> vals;
  std::vector<const Value*> slot;
  std::vector<char> fresh;
  std::vector<Value> moved;  // inputs copied to their reader's device, for the current step
  std::vector<const Value*> ins;
  std::vector<Value*> outs;
  std::vector<char> out_fresh;
  std::vector<TypeShape> in_types;  // a step's whose shapes are known only at run time
  std::vector<const TypeShape*> in_type_ptrs;
};

class ScratchLease {
 public:
  explicit ScratchLease(size_t values) {
    auto& pool = free_scratch();
    if (pool.empty()) {
      s_ = std::make_unique<RunScratch>();
    } else {
      s_ = std::move(pool.back());
      pool.pop_back();
    }
    s_->vals.resize(values);
    s_->slot.assign(values, nullptr);
    s_->fresh.assign(values, 0);
  }
  ~ScratchLease() {
    // (Empty ones skipped: assigning a Value moves every member it has room for, a tenth of a
    // Loop body's iteration.)
    for (Value& v : s_->vals)
      if (!v.is_none()) v = Value();
    for (Value& v : s_->moved)
      if (!v.is_none()) v = Value();
    free_scratch().push_back(std::move(s_));
  }
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  RunScratch& operator*() { return *s_; }

 private:
  static std::vector<std::unique_ptr<RunScratch>>& free_scratch() {
    thread_local std::vector<std::unique_ptr<RunScratch>> pool;
    return pool;
  }
  std::unique_ptr<RunScratch> s_;
};

// Arenas are the buffer pool's run arenas (arena_allocate), taken for a run and given back
// after it, not kept by the plan: a plan for a new input shape then finds pages that earlier runs
// faulted in, and cached plans hold no arenas. At a larger shape than any before (a decoder's
// past, sentences growing longer) the arena grows in place, and only now and then (GPT-2's step
// in Python, first runs at 7 growing pasts: 85, 0, 0, 0, 320, 0, 0 faults, where the pool's
// buffers of one size class each gave 0, 0, 0, 277, 68, 51, 53).
std::shared_ptr<void> take_arena(const Plan& plan) {
  if (plan.arena_bytes == 0) return nullptr;
  size_t capacity = 0;
  void* p = arena_allocate(plan.arena_bytes, &capacity);
  VOLT_CHECK(p, OutOfMemory,
             "out of memory allocating a " + std::to_string(plan.arena_bytes) + "-byte arena");
  return std::shared_ptr<void>(p, [capacity](void* q) { arena_free(q, capacity); });
}

// The arena counts against the run's memory limit while the run holds it; the check comes
// before the arena is allocated.
std::shared_ptr<MemoryBudget> reserve_arena(const Plan& plan) {
  if (plan.arena_bytes == 0) return nullptr;
  return reserve_in_current_run(plan.arena_bytes, "the intermediate values' arena");
}

// Returns the arena to the plan's pool when the run ends, normally or by an exception.
struct ArenaLease {
  ArenaLease(const Plan& p) : plan(p), budget(reserve_arena(p)) {
    try {
      arena = take_arena(plan);
    } catch (...) {
      if (budget) budget->release(plan.arena_bytes);
      throw;
    }
  }
  ~ArenaLease() {
    arena.reset();
    if (budget) budget->release(plan.arena_bytes);
  }
  const Plan& plan;
  std::shared_ptr<MemoryBudget> budget;
  std::shared_ptr<void> arena;
};

// The run's stream on the plan's accelerator, given back (after everything queued on it has
// finished) when the run ends, normally or by an exception.
struct StreamLease {
  explicit StreamLease(const Plan& plan) {
    if (!plan.uses_accelerator) return;
    device = plan.graph->accelerator;
    backend = &require_device(device);
    stream = backend->acquire_stream(device.index);
  }
  ~StreamLease() {
    if (backend) backend->release_stream(device.index, stream);
  }
  void finish() {
    if (backend) backend->synchronize(device.index, stream);
  }
  Device device;
  DeviceBackend* backend = nullptr;
  void* stream = nullptr;
};

// An input on another device than its reader's: a value fed on the accelerator that a host node
// reads, or one the placement did not route through a copy node. Copied here rather than read
// from the wrong memory.
const Value* on_device_of(const Value* v, Device device, Value& holder) {
  if (v->is_csr() && v->csr().defined() && v->csr().values().device() != device) {
    const CsrTensor& c = v->csr();
    holder =
        device.is_cpu() || c.values().device().is_cpu() ? c.to(device) : c.to(Device{}).to(device);
    return &holder;
  }
  if (!v->is_tensor() || v->tensor().device() == device || !v->tensor().defined()) return v;
  const Tensor& t = v->tensor();
  holder = device.is_cpu() || t.device().is_cpu() ? t.to(device) : t.to(Device{}).to(device);
  return &holder;
}

std::string where(const Plan& plan, const PlanStep& st) {
  return plan.graph->source + ": " + plan.graph->graph->nodes[st.node].describe() + ": ";
}

// Rethrows a kernel's failure with the model and node named, unless it already names them.
[[noreturn]] void rethrow_at(const Plan& plan, const PlanStep& st, const std::exception& e) {
  const std::string prefix = where(plan, st);
  const Error* ve = dynamic_cast<const Error*>(&e);
  const std::string msg = e.what();
  const std::string node_part = plan.graph->graph->nodes[st.node].describe();
  const std::string full =
      msg.find(node_part) != std::string::npos
          ? (msg.rfind(plan.graph->source, 0) == 0 ? msg : plan.graph->source + ": " + msg)
          : prefix + msg;
  if (dynamic_cast<const std::bad_alloc*>(&e)) throw Error(ErrorCode::OutOfMemory, full);
  throw Error(ve ? ve->code() : ErrorCode::Runtime, full);
}

// TypeShape::of(*v) (the default where v is null) into `t`, in the buffers it has: a step whose
// shapes are known only at run time reads its input types at each run.
void type_of_into(const Value* v, TypeShape& t) {
  if (!v || !v->is_tensor()) {
    t = v ? TypeShape::of(*v) : TypeShape{};
    return;
  }
  const Shape& shape = v->tensor().shape();
  t.kind = ValueInfo::Kind::Tensor;
  t.dtype = v->tensor().dtype();
  t.shape.assign(shape.begin(), shape.end());
  t.shape_known = true;
}

// Whether a view of the step's input 0 may live as long as the run holds it: the input is fed,
// a constant, or a heap value (which, when a view itself, is one of such a value).
bool views_outlive_run(const Plan& plan, const PlanStep& st) {
  if (st.inputs.empty() || st.inputs[0] < 0) return false;
  const Placement p = plan.placement[st.inputs[0]];
  return p == Placement::Input || p == Placement::Constant || p == Placement::Heap;
}

}  // namespace

std::vector<Value> execute_plan(const Plan& plan, const std::vector<const Value*>& fed,
                                const OutputObserver* observer) {
  const CompiledGraph& cg = *plan.graph;
  const size_t n = cg.names.size();
  // Subgraph runs nest inside a node of their parent: leave the thread count as found.
  const ScopedOmpThreads threads(plan.threads);

  ScratchLease scratch(n);
  std::vector<Value>& vals = (*scratch).vals;
  std::vector<const Value*>& slot = (*scratch).slot;
  std::vector<char>& fresh = (*scratch).fresh;
  for (size_t id = 0; id < n; ++id) {
    if (plan.placement[id] == Placement::Constant)
      slot[id] = plan.constants[id].get();
    else if (id < fed.size() && fed[id])
      slot[id] = fed[id];
  }
  ArenaLease lease(plan);
  char* arena = static_cast<char*>(lease.arena.get());
  StreamLease stream(plan);
  std::vector<Value>& moved = (*scratch).moved;

  const Graph& g = *cg.graph;
  const RunControl* control = current_run_control();
  RunProfile* profile = control ? control->profile() : nullptr;
  std::vector<const Value*>& ins = (*scratch).ins;
  std::vector<Value*>& outs = (*scratch).outs;
  std::vector<char>& out_fresh = (*scratch).out_fresh;
  // With an observer: which values are graph outputs, and which outputs it has seen.
  std::vector<char> is_output, observed;
  if (observer) {
    is_output.assign(n, 0);
    observed.assign(cg.graph_outputs.size(), 0);
    for (int id : cg.graph_outputs) is_output[static_cast<size_t>(id)] = 1;
  }
  auto observe = [&](int id) {
    for (size_t k = 0; k < cg.graph_outputs.size(); ++k)
      if (cg.graph_outputs[k] == id && !observed[k] && slot[id]) {
        observed[k] = 1;
        (*observer)(k, *slot[id]);
      }
  };
  for (const PlanStep& st : plan.steps) {
    const Node& node = g.nodes[st.node];
    bool on_accelerator = st.on_accelerator;
    Device step_device = on_accelerator ? cg.accelerator : Device{};
    check_run_interrupted();
    try {
      ins.assign(st.inputs.size(), nullptr);
      if (moved.size() < st.inputs.size()) moved.resize(st.inputs.size());
      for (size_t i = 0; i < st.inputs.size(); ++i) {
        const int id = st.inputs[i];
        if (id < 0) continue;
        if (!slot[id])
          fail(ErrorCode::Runtime,
               "input '" + cg.names[id] + "' has no value (internal planning error)");
        ins[i] = slot[id];
      }
      const KernelDef* chosen = st.def;
      const Kernel* kernel = st.kernel.get();
      const void* state = st.state.get();
      // Steps whose shapes depend on run-time values choose and prepare their kernel now.
      static const std::string kNoKernel;
      const std::string* kernel_name = st.def ? &st.def->name : &kNoKernel;
      const Kernel* run_kernel = nullptr;
      // (run_infer reads the input types while it lives.)
      std::vector<TypeShape>& in_types = (*scratch).in_types;
      std::vector<const TypeShape*>& in_type_ptrs = (*scratch).in_type_ptrs;
      std::optional<NodeInferContext> run_infer;
      // A deferred step's choice at this run: made now (run_infer) or the last run's (kept).
      std::shared_ptr<const DeferredChoice> kept;
      const std::vector<TypeShape>* run_outputs = nullptr;
      size_t run_scratch_bytes = 0;
      bool run_output_is_view = false;  // (the kernel sets output 0 as a view of input 0)
      const std::string* run_reference = nullptr;
      if (!st.shapes_static) {
        in_types.resize(ins.size());
        in_type_ptrs.assign(ins.size(), nullptr);
        for (size_t i = 0; i < ins.size(); ++i) {
          type_of_into(ins[i], in_types[i]);
          if (ins[i]) in_type_ptrs[i] = &in_types[i];
        }
        check_input_type_groups(node, in_type_ptrs);
        const bool keeps_choice = st.deferred_choices && !on_accelerator;
        if (keeps_choice) kept = st.deferred_choices->find(in_types, ins);
        if (kept) {
          run_kernel = kept->kernel;
          kernel_name = &kept->def->name;
          chosen = kept->def;
        }
        uint64_t values_read = 0;
        bool values_read_beyond = false;
        std::string reasons;
        for (const std::string* device : kernel_devices(cg, node)) {
          if (run_kernel) break;
          if (*device == cg.device && on_accelerator) {  // the host's kernels read host inputs
            on_accelerator = false;
            step_device = Device{};
            for (size_t i = 0; i < ins.size(); ++i)
              if (ins[i]) ins[i] = on_device_of(ins[i], step_device, moved[i]);
          }
          for (const KernelDef* def : KernelRegistry::instance().named(node.op_type)) {
            if (!def->matches(node, *device) || !def->accepts(in_type_ptrs) ||
                (plan.shape_generic && def->shape_specific))
              continue;
            // (The node's memo keeps the kernel for the session.)
            const Kernel& k = *cg.memos[st.node].kernel(def, [&] { return def->create(node); });
            // (A plan for several shapes, a plan for open axes among them, meets new shapes:
            // its kernels set up what is cheap for one, as the planner has them do, and
            // shape-specific ones are not chosen.)
            if (plan.shape_generic)
              run_infer.emplace(node, in_type_ptrs, ins, plan.threads, true,
                                cg.memos ? &cg.memos[st.node] : nullptr);
            else
              run_infer.emplace(node, in_type_ptrs, ins, plan.threads);
            // (The plan laid the arena out without knowing of it: a view of an arena value would
            // outlive the buffer's next use. A view of a fed input, a heap value or a constant
            // lives safely, as a reference to its buffer: a decoder step's layers' pasts are
            // views of the past fed, not copies.)
            run_infer->views_allowed = views_outlive_run(plan, st);
            try {
              k.infer(*run_infer);
            } catch (const KernelUnsupported& u) {
              values_read |= run_infer->values_read;
              values_read_beyond |= run_infer->values_read_beyond;
              reasons += "; " + u.reason;
              run_infer.reset();
              continue;
            }
            values_read |= run_infer->values_read;
            values_read_beyond |= run_infer->values_read_beyond;
            run_kernel = &k;
            kernel_name = &def->name;
            chosen = def;
            break;
          }
        }
        if (!run_kernel) fail(ErrorCode::NotImplemented, "no kernel for these inputs" + reasons);
        kernel = run_kernel;
        // (Kept only where every value the choice read is a constant of the plan: see
        // DeferredChoices. Checked here first, so that a choice that read a value of the run, as
        // a Slice in a Loop body does at each iteration, costs no copy.)
        bool keep = !kept && keeps_choice && !values_read_beyond && ins.size() <= 64;
        for (size_t i = 0; keep && i < ins.size(); ++i)
          keep = !(values_read >> i & 1) || !ins[i] ||
                 (st.inputs[i] >= 0 && plan.placement[st.inputs[i]] == Placement::Constant);
        // (Kept, the choice moves into the keeper and this run reads it from there.)
        if (keep)
          kept = st.deferred_choices->remember(
              in_types, ins, values_read,
              {chosen, run_kernel, std::move(run_infer->state), std::move(run_infer->outputs),
               run_infer->scratch_bytes, std::move(run_infer->reference),
               run_infer->output_is_view});
        state = kept ? kept->state.get() : run_infer->state.get();
        run_outputs = kept ? &kept->outputs : &run_infer->outputs;
        run_scratch_bytes = kept ? kept->scratch_bytes : run_infer->scratch_bytes;
        // (A kernel whose output always views its input, a Reshape's, allocates nothing either.)
        run_output_is_view = (kept ? kept->output_is_view : run_infer->output_is_view) ||
                             chosen->output_aliases_input;
        run_reference = kept ? &kept->reference : &run_infer->reference;
        if (st.checks_planned_types)
          for (size_t j = 0; j < st.outputs.size(); ++j) {
            const int id = st.outputs[j];
            if (id >= 0 && plan.types[id].shape_known &&
                !same_type((*run_outputs)[j], plan.types[id]))
              throw OpenAxesMismatch();
          }
      }
      // Each input where the kernel reads it: its step's device, except the host inputs of a
      // device kernel; Shape/Size and the copy nodes take values wherever they are.
      const bool keep_device =
          chosen && (chosen->reads_metadata_only || chosen->moves_between_devices);
      if (!keep_device)
        for (size_t i = 0; i < ins.size(); ++i) {
          if (!ins[i]) continue;
          const bool host_slot = on_accelerator && chosen &&
                                 std::find(chosen->host_inputs.begin(), chosen->host_inputs.end(),
                                           static_cast<int>(i)) != chosen->host_inputs.end();
          ins[i] = on_device_of(ins[i], host_slot ? Device{} : step_device, moved[i]);
        }
      outs.assign(st.outputs.size(), nullptr);
      out_fresh.assign(st.outputs.size(), 0);
      for (size_t j = 0; j < st.outputs.size(); ++j) {
        const int id = st.outputs[j];
        if (id < 0) continue;
        outs[j] = &vals[id];
        const TypeShape& t = run_outputs ? (*run_outputs)[j] : plan.types[id];
        const Placement p = plan.placement[id];
        if (p == Placement::Arena && st.shapes_static) {
          vals[id] = Tensor::view(t.dtype, t.shape, arena + plan.arena_offset[id], lease.arena);
        } else if (p != Placement::View && !(j == 0 && run_output_is_view) &&
                   t.kind == ValueInfo::Kind::Tensor && t.shape_known &&
                   t.dtype != DType::Undefined) {
          // (Strings live on the host only: a copy node passes them through.)
          vals[id] = on_accelerator && t.dtype != DType::String
                         ? allocate_on_device(step_device, t.dtype, t.shape, stream.stream)
                         : allocate_tensor(t.dtype, t.shape, t.dtype == DType::String);
          out_fresh[j] = 1;
        }
      }
      std::unique_ptr<char[]> run_scratch;
      Tensor device_scratch;
      void* scratch = st.scratch_offset >= 0 ? arena + st.scratch_offset : nullptr;
      const size_t device_scratch_bytes =
          run_outputs ? run_scratch_bytes : (on_accelerator ? st.scratch_bytes : 0);
      if (on_accelerator && device_scratch_bytes) {
        device_scratch = allocate_on_device(
            step_device, DType::UInt8, {static_cast<int64_t>(device_scratch_bytes)}, stream.stream);
        scratch = device_scratch.raw();
      } else if (run_outputs && run_scratch_bytes) {
        run_scratch.reset(new char[run_scratch_bytes + 64]);
        scratch = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(run_scratch.get()) + 63) &
                                          ~uintptr_t{63});
      }
      NodeRunContext::Captured captured;
      const auto& all_inputs = cg.node_inputs[st.node];
      for (size_t i = node.inputs.size(); i < all_inputs.size(); ++i)
        captured.emplace_back(&cg.names[all_inputs[i]], slot[all_inputs[i]]);
      NodeRunContext ctx(node, ins, outs, &out_fresh, state, scratch, plan.threads, &captured);
      // Device kernels and the copy nodes work on the run's stream. (A copy to the host runs
      // on the host but reads what that stream computes; on another stream it read values
      // before they were written: the legacy default stream does not wait for a non-blocking
      // one.)
      if (on_accelerator || (stream.stream && chosen && chosen->moves_between_devices))
        ctx.place_on(cg.accelerator, stream.stream);
      if (profile) {
        const double start = control->elapsed_us();
        kernel->run(ctx);
        profile->events.push_back({node.name.empty() ? node.op_type : node.name, node.fused_op(),
                                   *kernel_name, start, control->elapsed_us() - start,
                                   run_reference ? *run_reference : st.reference});
      } else {
        kernel->run(ctx);
      }
      for (size_t j = 0; j < st.outputs.size(); ++j) {
        const int id = st.outputs[j];
        if (id < 0) continue;
        slot[id] = &vals[id];
        fresh[id] = out_fresh[j];
        if (observer && is_output[static_cast<size_t>(id)]) observe(id);
      }
    } catch (const OpenAxesMismatch&) {
      throw;  // (for the runner, which runs the shape on a plan of its own)
    } catch (const std::exception& e) {
      rethrow_at(plan, st, e);
    }
    for (Value& m : moved)
      if (!m.is_none()) m = Value();
    for (int id : st.release) {
      vals[id] = Value();
      slot[id] = nullptr;
    }
  }

  stream.finish();
  if (observer)  // outputs no step computes (inputs, constants)
    for (int id : cg.graph_outputs) observe(id);
  std::vector<Value> result;
  result.reserve(cg.graph_outputs.size());
  for (int id : cg.graph_outputs) {
    VOLT_CHECK(slot[id], Runtime,
               cg.source + ": graph output '" + cg.names[id] + "' was not computed");
    const Value& v = *slot[id];
    if (fresh[id] || !v.is_tensor()) {
      result.push_back(v);
    } else {
      result.push_back(v.tensor().clone());
    }
    fresh[id] = 0;  // the same value listed twice as an output is copied the second time
  }
  return result;
}

}  // namespace volt
