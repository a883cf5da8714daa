// A graph ready to run: compiled once, with plans cached by input signature. The Session runs
// its main graph through one; If, Loop, Scan and SequenceMap run their bodies through others.
#pragma once
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/compiled_graph.hpp"
#include "runtime/executor.hpp"
#include "runtime/plan.hpp"

namespace volt {

// Plans keyed by input signature, least recently used evicted past `capacity`.
class PlanCache {
 public:
  explicit PlanCache(size_t capacity) : capacity_(capacity) {}
  std::shared_ptr<const Plan> find(const std::string& key);
  std::shared_ptr<const Plan> insert(const std::string& key, std::shared_ptr<const Plan> plan);
  // Puts `plan` in the place of the key's entry (or adds it).
  void replace(const std::string& key, std::shared_ptr<const Plan> plan);
  size_t size() const;

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const Plan>>;
  // Adds the entry as the most recent and evicts past the capacity (mutex_ held). The evicted
  // plans go to `evicted`, which the caller declares before its lock: a plan is freed (its
  // steps, states and types, tens of microseconds) after the lock is released, not while
  // other threads wait to look theirs up.
  std::shared_ptr<const Plan> add_locked(const std::string& key, std::shared_ptr<const Plan> plan,
                                         std::vector<std::shared_ptr<const Plan>>& evicted);
  mutable std::mutex mutex_;
  size_t capacity_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

class GraphRunner {
 public:
  GraphRunner(std::shared_ptr<const Graph> graph, const std::string& source,
              const std::string& device, int threads,
              const std::vector<std::string>& outer_scope = {}, size_t plan_cache_capacity = 64);

  // A session's main graph, which the runner owns: weights that the first plan's kernels keep
  // their own copies of (Plan::released) leave the graph too, and come back for good, rebuilt
  // from those copies, when the runner builds a second plan.
  static std::unique_ptr<GraphRunner> owning(std::shared_ptr<Graph> graph,
                                             const std::string& source, const std::string& device,
                                             int threads, size_t plan_cache_capacity);

  const CompiledGraph& compiled() const { return compiled_; }
  int threads() const { return threads_; }

  // Runs with values by id (graph inputs and outer-scope values; nullptr where not fed);
  // returns the graph outputs in order.
  // `observer`: see execute_plan.
  std::vector<Value> run(const std::vector<const Value*>& fed,
                         const OutputObserver* observer = nullptr) const;
  // The plan `fed` runs on. `open_allowed`: it may be the plan for open axes (see open_plan_),
  // whose run may end in OpenAxesMismatch (run() then runs the shape on a plan of its own).
  std::shared_ptr<const Plan> plan_for(const std::vector<const Value*>& fed,
                                       bool open_allowed = false) const;
  size_t cached_plans() const { return plans_.size(); }

 private:
  // The graph compiled for the inputs fed as CSR matrices (see densify_sparse_inputs); the
  // same value ids as compiled_ for everything compiled_ has.
  const CompiledGraph& compiled_for(const std::vector<const Value*>& fed) const;

  // Puts the released weights back into the graph (before a plan is built).
  void restore_released() const;
  // The fed inputs, by value id, with their types: the open axes' sizes -1.
  using OpenPattern = std::vector<std::pair<int, TypeShape>>;
  // Builds the plan for `fed` (under build_mutex_); `shape_generic`: see Plan::shape_generic.
  // With `open`: the plan for those open axes (Plan::serves_open_axes).
  std::unique_ptr<Plan> build_locked(const std::vector<const Value*>& fed, bool shape_generic,
                                     const OpenPattern* open = nullptr) const;
  // The plan for open axes where `fed` fits it (counting the shape's runs on it, and building
  // the shape's own plan at its run kRunsBeforeSpecializing); null otherwise.
  std::shared_ptr<const Plan> on_open_plan(const std::string& key,
                                           const std::vector<const Value*>& fed) const;
  // Builds the plan for open axes for `fed` (under build_mutex_) where the session's first plan
  // and its last shape-generic one differ in some input axes, `fed` differs from them only
  // there, and most of the graph does not depend on them; null otherwise. `key`: the input
  // signature of `fed` where it is to run on the plan (its runs counted), else null.
  std::shared_ptr<const Plan> try_open_plan(const std::string* key,
                                            const std::vector<const Value*>& fed) const;
  // Where a run of the plan for open axes met a shape it did not plan for: shapes run on plans
  // of their own from then on.
  void drop_open_plan() const;
  // The plan specialized to a shape whose shape-generic plan `generic` has run often enough;
  // `generic` itself if building it fails.
  std::shared_ptr<const Plan> specialize(const std::string& key,
                                         const std::vector<const Value*>& fed,
                                         std::shared_ptr<const Plan> generic) const;

  CompiledGraph compiled_;
  int threads_;
  mutable PlanCache plans_;
  // Plans are built one at a time: building one may restore released weights into the graph.
  mutable std::mutex build_mutex_;
  std::shared_ptr<Graph> owned_graph_;  // set for owning runners: the graph compiled_ reads
  mutable std::map<std::string, std::function<Tensor()>> released_;
  mutable bool built_a_plan_ = false;  // (under build_mutex_)
  // The heap was warmed for this runner's plans (warm_heap_for_plans; under build_mutex_).
  mutable bool warmed_heap_ = false;
  // The last shape-generic plan built (under build_mutex_): the next one takes its steps for
  // nodes whose inputs keep their types (PlanInputs::previous).
  mutable std::shared_ptr<const Plan> last_generic_;
  // How many times the owned graph's initializers changed (restored or dropped), and how many
  // times by when last_generic_ was built (under build_mutex_; PlanInputs::
  // initializers_as_in_previous).
  mutable uint64_t initializer_changes_ = 0, initializer_changes_at_last_generic_ = 0;
  // The first plan's value types (under build_mutex_; PlanInputs::first_types).
  mutable std::vector<TypeShape> first_types_;
  // The session's first plan: the first shape-generic plan and every specialized one build on it
  // (PlanInputs::previous), taking its steps where the inputs kept their types; and how many
  // initializer changes there had been when it was built (under build_mutex_).
  mutable std::shared_ptr<const Plan> first_plan_;
  mutable uint64_t initializer_changes_at_first_ = 0;
  // The plan for open axes: a decoder step fed a past of a new length at nearly every run, a
  // model fed sentences of many lengths, run each new shape on one plan in which only the steps
  // that depend on the varying axes choose their kernels at run time (Plan::serves_open_axes),
  // rather than building a plan per shape; a shape that recurs gets a plan of its own at its run
  // kRunsBeforeSpecializing. Built at most once (open_tried_, under build_mutex_), from the
  // axes in which the session's first plan and its last shape-generic plan differ.
  mutable std::mutex open_mutex_;
  mutable std::shared_ptr<const Plan> open_plan_;  // (under open_mutex_, as the two below)
  mutable OpenPattern open_pattern_;
  mutable std::unordered_map<std::string, uint32_t> open_runs_;  // by input signature
  mutable bool open_tried_ = false;
  mutable std::mutex variants_mutex_;
  mutable std::map<std::string, std::unique_ptr<CompiledGraph>> sparse_variants_;
};

}  // namespace volt
