// A Plan: what running a CompiledGraph on one set of input shapes takes. Steps in order, each
// with its kernel, prepared state and output types; constants computed at plan time; every
// intermediate's offset in one arena. Immutable once built, so runs may share it.
#pragma once
#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "operators/kernel.hpp"
#include "operators/registry.hpp"
#include "runtime/compiled_graph.hpp"
#include "runtime/deferred_choice.hpp"
#include "runtime/memory_plan.hpp"

namespace volt {

struct PlanStep {
  int node = -1;  // index into graph nodes
  const KernelDef* def = nullptr;
  // The node's kernel, shared with the session's other plans (NodeMemo::kernel); a step whose
  // shapes are known only at run time finds its kernels there too.
  std::shared_ptr<const Kernel> kernel;
  std::shared_ptr<void> state;
  // Value ids of the node's explicit inputs and of its outputs (-1 = omitted), in the compiled
  // graph's lists (CompiledGraph::node_inputs, node_outputs). The outputs' types are the plan's
  // (Plan::types).
  std::span<const int> inputs;
  std::span<const int> outputs;
  bool shapes_static = true;  // false: infer() runs again at run time with the real inputs
  // Output 0 is a view of input 0 (KernelDef::output_aliases_input, or the kernel said so for
  // these shapes: InferContext::output_views_input).
  bool output_is_view = false;
  // Inputs that may be computed straight into output 0, with their byte offsets there
  // (InferContext::input_may_live_in_output).
  std::vector<std::pair<int, size_t>> inputs_in_output;
  // Runs on the compiled graph's accelerator: the node was placed there and a device kernel
  // took it (else its host kernel runs, inputs copied over by the executor).
  bool on_accelerator = false;
  int64_t scratch_offset = -1;
  size_t scratch_bytes = 0;
  std::string reference;  // why the kernel runs its reference loop (InferContext); empty if not
  // A step whose shapes are known only at run time: its last run's kernel choice, taken again
  // where the next run's inputs are as they were (DeferredChoices). Each plan has its own.
  std::shared_ptr<DeferredChoices> deferred_choices;
  std::vector<int> release;  // heap values to drop after this step (last use)
  // In a plan for open axes (Plan::serves_open_axes), a step whose shapes are known only at run
  // time whose outputs the plan gave types (PlanInputs::open_axes_witnesses): each run checks
  // that they are what it computes (OpenAxesMismatch where not).
  bool checks_planned_types = false;
};

// Where a value lives during a run.
enum class Placement : uint8_t { None, Constant, Input, Arena, Heap, View };

struct Plan {
  const CompiledGraph* graph = nullptr;
  std::vector<PlanStep> steps;
  // By value id: initializers and plan-time results; null for the others. Shared, so that plans
  // for other shapes hold the same values (and a plan costs 16 bytes per value id, not a Value).
  std::vector<std::shared_ptr<const Value>> constants;
  std::vector<TypeShape> types;       // by value id, as known at plan time
  std::vector<Placement> placement;   // by value id
  std::vector<int64_t> arena_offset;  // by value id; -1 when not in the arena
  size_t arena_bytes = 0;
  // In a plan for one of several shapes, the arena's layout, which the next such plan takes as it
  // is where its buffers fit (layout_arena_for_shapes); null otherwise.
  std::shared_ptr<const SharedArenaLayout> arena_layout;
  int threads = 1;
  bool uses_accelerator = false;  // some step runs on cg.accelerator: runs take a stream there
  // Initializers whose data this plan dropped because every step that reads them keeps its own
  // copy (InferContext::keeps_copy_of_input): their constants carry dtype and shape only. Each
  // comes with what rebuilds it, so that the graph's owner can drop its copy too.
  std::vector<std::pair<int, std::function<Tensor()>>> released;
  // Built for one of several input shapes (PlanInputs::shapes_vary): its kernels chose what is
  // cheap to set up for a new shape over what runs fastest at this one. GraphRunner counts its
  // runs and, once the shape proves to recur, builds the specialized plan in its place.
  bool shape_generic = false;
  mutable std::atomic<uint32_t> runs{0};
  // Built with some input axes open (their sizes unknown): it runs every shape that differs from
  // its inputs' only in those axes (GraphRunner's open-axes plan). The steps that depend on an
  // open axis choose at run time; the others are planned as usual.
  bool serves_open_axes = false;

  // One line per step and per value: where it lives and what is freed. For debugging.
  std::string describe() const;
};

struct PlanInputs {
  std::vector<TypeShape> types;  // by value id; kind Undefined dtype = not fed
  std::vector<char>
      fed;  // by value id: graph inputs (and overridden initializers) given by the caller
  // Called as soon as the plan drops an initializer's data (Plan::released), with what rebuilds
  // it: the caller, when it owns the graph, may then drop the graph's copy at once.
  std::function<void(int id, const std::function<Tensor()>& restore)> release;
  // Plans for other input shapes were built before this one (InferContext::shapes_vary).
  bool shapes_vary = false;
  // The last shape-generic plan of the same graph, if any: a node whose inputs have the same
  // types and constant values there takes its step as it is (kernel, state, output types) instead
  // of being planned again. In a decoder step whose past grows, the new token's projections and
  // MLP keep their shapes while the attention over the past changes.
  std::shared_ptr<const Plan> previous;
  // The graph's initializers are the tensors they were when `previous` was built (none restored
  // or dropped since): the plan then takes their values and types from it by id, without walking
  // the graph's map of them (a decoder step's 150 weights and constants, at each new past).
  bool initializers_as_in_previous = false;
  // The value types of the session's first plan of this graph, if any: in a plan for several
  // shapes, a node whose inputs have the types they had there is planned as for one shape
  // (fixed-size primitives, oneDNN's shape-specific kernels), since its shapes have not varied:
  // a decoder step's projections of its one new token, whatever the past's length.
  const std::vector<TypeShape>* first_types = nullptr;
  // For a plan with open axes (fed inputs whose shapes are unknown here: Plan::serves_open_axes):
  // the value types of two plans for shapes that differed only in those axes. A step whose shapes
  // are known only at run time gives each output that had one type in both that type at plan
  // time, so that the steps reading it are planned as usual; it checks the type at each run
  // (PlanStep::checks_planned_types). A decoder step's attention over a past of any length
  // returns one row per head whatever the length: the projections after it keep their
  // fixed-size primitives.
  const std::vector<TypeShape>* open_axes_witnesses[2] = {nullptr, nullptr};
  // With a previous plan whose constants include weights a plan released (data dropped, dtype
  // and shape kept: is_released_weight): what brings one back, for a node planned afresh that
  // reads it. Nodes whose steps are taken from the previous plan keep their own copies and need
  // none: a decoder's second past length rebuilds no weight of its projections (GPT-2's step:
  // 20 MiB, 5500 page faults, at its first new shape).
  std::function<std::shared_ptr<const Value>(int id)> restore_weight;
};

// Whether `v` is a released weight's stand-in: a tensor with dtype and shape but no data.
inline bool is_released_weight(const std::shared_ptr<const Value>& v) {
  return v && v->is_tensor() && !v->tensor().raw() && v->tensor().numel() > 0;
}

// Thrown by execute_plan where a run of a plan for open axes computes a type other than the one
// the plan assumed (PlanStep::checks_planned_types): a value that had one shape at the two
// witnessed shapes has another at this one. Nothing the run computed is returned; the caller
// runs the shape on a plan of its own.
struct OpenAxesMismatch : std::exception {
  const char* what() const noexcept override {
    return "a plan for open axes met a shape it did not plan for";
  }
};

// Where a node's kernels are looked for, in order: its own device, then, for nodes placed on an
// accelerator, the host (a shape or attribute the device kernel declines).
struct KernelDevices {
  const std::string* devices[2];
  int count;
  const std::string* const* begin() const { return devices; }
  const std::string* const* end() const { return devices + count; }
};
KernelDevices kernel_devices(const CompiledGraph& cg, const Node& node);

// Inputs that the op's schema gives one type variable have one dtype (Node::input_type_group);
// ErrorCode::InvalidModel otherwise, before a kernel reads one as the other's type.
void check_input_type_groups(const Node& node, std::span<const TypeShape* const> in_types);

std::unique_ptr<Plan> build_plan(const CompiledGraph& cg, const PlanInputs& inputs, int threads);

}  // namespace volt
