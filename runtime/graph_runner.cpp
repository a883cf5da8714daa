#include "runtime/graph_runner.hpp"

#include <algorithm>

#include "runtime/buffer_pool.hpp"
#include "runtime/executor.hpp"
#include "runtime/passes/passes.hpp"
#include "runtime/run_control.hpp"

namespace volt {

std::shared_ptr<const Plan> PlanCache::find(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

std::shared_ptr<const Plan> PlanCache::insert(const std::string& key,
                                              std::shared_ptr<const Plan> plan) {
  std::vector<std::shared_ptr<const Plan>> evicted;  // (freed after the lock: see add_locked)
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = index_.find(key);
  if (it != index_.end()) return it->second->second;  // another thread built it first
  return add_locked(key, std::move(plan), evicted);
}

std::shared_ptr<const Plan> PlanCache::add_locked(
    const std::string& key, std::shared_ptr<const Plan> plan,
    std::vector<std::shared_ptr<const Plan>>& evicted) {
  lru_.emplace_front(key, std::move(plan));
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    evicted.push_back(std::move(lru_.back().second));
    lru_.pop_back();
  }
  return lru_.front().second;
}

void PlanCache::replace(const std::string& key, std::shared_ptr<const Plan> plan) {
  std::vector<std::shared_ptr<const Plan>> evicted;
  std::shared_ptr<const Plan> replaced;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = index_.find(key);
  if (it != index_.end()) {
    replaced = std::move(it->second->second);
    it->second->second = std::move(plan);
  } else {
    add_locked(key, std::move(plan), evicted);
  }
}

size_t PlanCache::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return lru_.size();
}

namespace {
// What a plan depends on, as raw 64-bit words: id, kind, dtype, then the dimensions (rows and
// columns of a CSR matrix), then a terminator. Binary, not text: a Loop body looks its plan up
// once per iteration.
void append_signature(std::string& key, size_t id, const Value& v) {
  auto word = [&](int64_t w) { key.append(reinterpret_cast<const char*>(&w), sizeof w); };
  word(static_cast<int64_t>(id));
  word(static_cast<int64_t>(v.kind()));
  if (v.is_tensor()) {
    word(static_cast<int64_t>(v.tensor().dtype()));
    for (int64_t d : v.tensor().shape()) word(d);
  } else if (v.is_csr()) {
    word(static_cast<int64_t>(v.csr().dtype()));
    word(v.csr().rows());
    word(v.csr().cols());
  } else if (v.is_sequence()) {
    word(static_cast<int64_t>(v.sequence_dtype()));
  }
  word(-1);  // (dimensions are never negative)
}
}  // namespace

GraphRunner::GraphRunner(std::shared_ptr<const Graph> graph, const std::string& source,
                         const std::string& device, int threads,
                         const std::vector<std::string>& outer_scope, size_t plan_cache_capacity)
    : compiled_(compile_graph(std::move(graph), source, device, outer_scope)),
      threads_(threads),
      plans_(plan_cache_capacity) {}

std::unique_ptr<GraphRunner> GraphRunner::owning(std::shared_ptr<Graph> graph,
                                                 const std::string& source,
                                                 const std::string& device, int threads,
                                                 size_t plan_cache_capacity) {
  auto runner = std::make_unique<GraphRunner>(graph, source, device, threads,
                                              std::vector<std::string>{}, plan_cache_capacity);
  runner->owned_graph_ = std::move(graph);
  return runner;
}

void GraphRunner::restore_released() const {
  if (!released_.empty()) ++initializer_changes_;
  for (auto& [name, restore] : released_) owned_graph_->initializers[name] = restore();
  released_.clear();
}

const CompiledGraph& GraphRunner::compiled_for(const std::vector<const Value*>& fed) const {
  std::vector<std::string> sparse, spmm_ok;
  std::string key;
  for (size_t id = 0; id < fed.size(); ++id)
    if (fed[id] && fed[id]->is_csr()) {
      sparse.push_back(compiled_.names[id]);
      const bool f32 = fed[id]->csr().dtype() == DType::Float;
      if (f32) spmm_ok.push_back(compiled_.names[id]);
      key += std::to_string(id) + (f32 ? "f," : "d,");
    }
  if (sparse.empty()) return compiled_;
  std::lock_guard<std::mutex> lock(variants_mutex_);
  auto& variant = sparse_variants_[key];
  if (!variant) {
    auto graph =
        std::make_shared<const Graph>(densify_sparse_inputs(*compiled_.graph, sparse, spmm_ok));
    std::vector<std::string> outer;
    for (int id : compiled_.outer_scope) outer.push_back(compiled_.names[id]);
    // (compiled_.device is the host kernels' "cpu"; the variant runs on the session's device.)
    variant = std::make_unique<CompiledGraph>(
        compile_graph(graph, compiled_.source, compiled_.accelerator.str(), outer));
  }
  return *variant;
}

// A shape-generic plan (one built after the session's first shape) is replaced by one
// specialized to its shape when it starts its run number kRunsBeforeSpecializing: by then the
// shape recurs, and what a specialized plan saves per run (fixed-size primitives: oneDNN's
// brgemm matmuls on AVX-512, one LayerNorm pass over exactly the rows, a recurrent layer in one
// primitive rather than chunks) outweighs building it once more. It saves 5-30% of a run and
// costs a plan with per-shape code generation (3-10 ms for the corpus's recognizer and speech
// models), so it waits for a shape's eighth run: in streams of random lengths, where a length
// comes back a handful of times, specializing at the fourth built plans that never paid back
// (200 random lengths, volt's total, medians of 4 alternating runs: text classifier 410 -> 371
// ms, recognizer 1137 -> 1124, GPT-2 step unchanged), while a shape that keeps recurring runs
// four more times on its generic plan, once.
constexpr uint32_t kRunsBeforeSpecializing = 8;

std::shared_ptr<const Plan> GraphRunner::plan_for(const std::vector<const Value*>& fed,
                                                  bool open_allowed) const {
  // (Built in a buffer this thread keeps, so that a lookup does not allocate.)
  thread_local std::string key;
  key.clear();
  for (size_t id = 0; id < fed.size(); ++id)
    if (fed[id]) append_signature(key, id, *fed[id]);
  if (auto p = plans_.find(key)) {
    // (Building the plan was its first run: this lookup is run number runs + 2.)
    if (!p->shape_generic ||
        p->runs.fetch_add(1, std::memory_order_relaxed) + 2 != kRunsBeforeSpecializing)
      return p;
    return specialize(std::string(key), fed, std::move(p));
  }
  // A copy from here on: building a plan may run subgraphs, whose lookups reuse the buffer.
  const std::string own_key = key;
  if (open_allowed)
    if (auto p = on_open_plan(own_key, fed)) return p;
  std::lock_guard<std::mutex> building(build_mutex_);
  if (auto p = plans_.find(own_key)) return p;  // built by another thread meanwhile
  if (open_allowed && !open_tried_ && built_a_plan_)
    if (auto p = try_open_plan(&own_key, fed)) return p;
  const bool first = !built_a_plan_;
  auto plan = plans_.insert(own_key, build_locked(fed, built_a_plan_));
  if (first && plan->graph == &compiled_) first_plan_ = plan;
  if (plan->shape_generic) {
    last_generic_ = plan;
    initializer_changes_at_last_generic_ = initializer_changes_;
    // The plan for open axes is built with the first shape-generic plan, which tells them: the
    // next new shape runs on it rather than paying its build. (Built at the shape after, GPT-2's
    // step ran its third past length 1.5-1.6x slower than its next runs there.)
    if (open_allowed && !open_tried_) try_open_plan(nullptr, fed);
  }
  return plan;
}

std::shared_ptr<const Plan> GraphRunner::specialize(const std::string& key,
                                                    const std::vector<const Value*>& fed,
                                                    std::shared_ptr<const Plan> generic) const {
  std::lock_guard<std::mutex> building(build_mutex_);
  std::shared_ptr<const Plan> specialized;
  try {
    specialized = build_locked(fed, false);
  } catch (const std::exception&) {
    return generic;  // (the generic plan ran this shape; it goes on doing so)
  }
  plans_.replace(key, specialized);
  return specialized;
}

namespace {
// Whether `fed` feeds the pattern's inputs and no other, with their dtypes and ranks, and their
// sizes where they are not -1.
bool fits(const std::vector<std::pair<int, TypeShape>>& pattern,
          const std::vector<const Value*>& fed) {
  size_t fed_count = 0;
  for (const Value* v : fed) fed_count += v != nullptr;
  if (fed_count != pattern.size()) return false;
  for (const auto& [id, p] : pattern) {
    const Value* v = static_cast<size_t>(id) < fed.size() ? fed[static_cast<size_t>(id)] : nullptr;
    if (!v || !v->is_tensor() || v->tensor().dtype() != p.dtype) return false;
    const auto& shape = v->tensor().shape();
    if (shape.size() != p.shape.size()) return false;
    for (size_t i = 0; i < shape.size(); ++i)
      if (p.shape[i] >= 0 && p.shape[i] != shape[i]) return false;
  }
  return true;
}

// How many shapes' runs on the plan for open axes are counted at most (a decoder step meets a
// new length at nearly every run; the count starts again past this many).
constexpr size_t kMaxCountedShapes = 1024;
}  // namespace

std::shared_ptr<const Plan> GraphRunner::on_open_plan(const std::string& key,
                                                      const std::vector<const Value*>& fed) const {
  std::shared_ptr<const Plan> plan;
  uint32_t runs = 0;
  {
    std::lock_guard<std::mutex> lock(open_mutex_);
    if (!open_plan_ || !fits(open_pattern_, fed)) return nullptr;
    plan = open_plan_;
    if (open_runs_.size() >= kMaxCountedShapes && !open_runs_.count(key)) open_runs_.clear();
    runs = ++open_runs_[key];
    if (runs == kRunsBeforeSpecializing) open_runs_.erase(key);
  }
  if (runs != kRunsBeforeSpecializing) return plan;
  return specialize(key, fed, std::move(plan));
}

std::shared_ptr<const Plan> GraphRunner::try_open_plan(const std::string* key,
                                                       const std::vector<const Value*>& fed) const {
  // (Host sessions only: run-time views and choices on an accelerator's plans are untried.)
  if (!last_generic_ || last_generic_->graph != &compiled_ || first_types_.empty() ||
      &compiled_for(fed) != &compiled_ || !compiled_.accelerator.is_cpu())
    return nullptr;
  const Plan& last = *last_generic_;
  // The open axes: where the first plan's inputs and the last shape-generic plan's differ.
  OpenPattern pattern;
  bool any_open = false;
  for (size_t id = 0; id < compiled_.names.size(); ++id) {
    const bool was_fed = last.placement[id] == Placement::Input;
    const bool is_fed = id < fed.size() && fed[id];
    if (was_fed != is_fed) return nullptr;
    if (!is_fed) continue;
    const TypeShape &a = first_types_[id], &b = last.types[id];
    if (!fed[id]->is_tensor() || a.kind != ValueInfo::Kind::Tensor || !a.shape_known ||
        !b.shape_known || a.dtype != b.dtype || a.shape.size() != b.shape.size())
      return nullptr;
    TypeShape& p = pattern.emplace_back(static_cast<int>(id), b).second;
    for (size_t i = 0; i < a.shape.size(); ++i)
      if (a.shape[i] != b.shape[i]) {
        p.shape[i] = -1;
        any_open = true;
      }
  }
  if (!any_open || !fits(pattern, fed)) return nullptr;  // (perhaps at a later shape)
  open_tried_ = true;
  // Worth it where most steps keep their shapes whatever the open axes' sizes: a step that
  // depends on them chooses its kernel at each run, on heap buffers. (The two plans tell which
  // do; a sentence's length reaches every step of a text classifier, a decoder's past only its
  // attention and the present it returns.)
  size_t varying = 0;
  for (const PlanStep& st : last.steps)
    for (const int id : st.outputs)
      if (id >= 0 && !same_type(first_types_[id], last.types[id])) {
        ++varying;
        break;
      }
  if (2 * varying > last.steps.size()) return nullptr;
  std::shared_ptr<const Plan> plan;
  try {
    plan = build_locked(fed, true, &pattern);
  } catch (const std::exception&) {
    return nullptr;  // (the shape gets a plan of its own, whose failure, if any, is the caller's)
  }
  size_t at_run_time = 0;
  for (const PlanStep& st : plan->steps) at_run_time += !st.shapes_static;
  if (2 * at_run_time > plan->steps.size()) return nullptr;
  std::lock_guard<std::mutex> lock(open_mutex_);
  open_plan_ = plan;
  open_pattern_ = std::move(pattern);
  if (key) open_runs_[*key] = 1;
  return plan;
}

void GraphRunner::drop_open_plan() const {
  std::lock_guard<std::mutex> lock(open_mutex_);
  open_plan_.reset();
  open_runs_.clear();
}

std::unique_ptr<Plan> GraphRunner::build_locked(const std::vector<const Value*>& fed,
                                                bool shape_generic, const OpenPattern* open) const {
  // Weights the plan drops become the packed copies of the next ones (RecycleLastingBuffers).
  const RecycleLastingBuffers recycle;
  // A plan builds on one before it (PlanInputs::previous), taking its steps for the nodes whose
  // inputs kept their types: a shape-generic plan on the last such plan (or the session's first
  // while there is none), a specialized one on the session's first (a step of the same kind).
  // Where the same inputs are fed, the weights the first plan released come back one by one, for
  // the nodes planned afresh that read them (PlanInputs::restore_weight); otherwise all of them,
  // now.
  const bool on_last_generic = shape_generic && last_generic_;
  const std::shared_ptr<const Plan> previous = on_last_generic ? last_generic_ : first_plan_;
  const uint64_t changes_at_previous =
      on_last_generic ? initializer_changes_at_last_generic_ : initializer_changes_at_first_;
  bool lazily = previous && previous->graph == &compiled_ && owned_graph_;
  for (size_t id = 0; lazily && id < previous->placement.size(); ++id) {
    const bool is_fed = id < fed.size() && fed[id];
    lazily = is_fed == (previous->placement[id] == Placement::Input) &&
             !(is_fed && fed[id]->is_csr());  // (CSR variants copy the graph: whole)
  }
  if (!lazily) restore_released();
  const CompiledGraph& cg = compiled_for(fed);
  PlanInputs in;
  in.types.resize(cg.names.size());
  in.fed.assign(cg.names.size(), 0);
  for (size_t id = 0; id < fed.size(); ++id)
    if (fed[id]) {
      in.types[id] = TypeShape::of(*fed[id]);
      in.fed[id] = 1;
    }
  // The graph drops each weight the plan keeps a copy of as soon as it is copied; released_
  // keeps the way back, even if this build fails later. Only the first plan does: a second one
  // means the model is fed more than one shape, and then the graph keeps its weights (rebuilt
  // once, here), so that a new shape costs no rebuild and finds its packed weights in the cache
  // every plan shares (dnnl_adapter::pack_constant).
  if (owned_graph_ && &cg == &compiled_ && !built_a_plan_)  // CSR variants keep their own graphs
    in.release = [this](int id, const std::function<Tensor()>& restore) {
      const std::string& name = compiled_.names[id];
      released_[name] = restore;
      owned_graph_->initializers.erase(name);
      ++initializer_changes_;
    };
  if (open) {
    for (const auto& [id, t] : *open) {
      if (std::find(t.shape.begin(), t.shape.end(), -1) == t.shape.end()) continue;
      in.types[static_cast<size_t>(id)].shape.clear();
      in.types[static_cast<size_t>(id)].shape_known = false;
    }
    in.open_axes_witnesses[0] = &first_types_;
    in.open_axes_witnesses[1] = &last_generic_->types;
  }
  in.shapes_vary = shape_generic;
  in.previous = previous;
  in.initializers_as_in_previous = previous && initializer_changes_ == changes_at_previous;
  if (lazily && !released_.empty())
    in.restore_weight = [this](int id) {
      const std::string& name = compiled_.names[id];
      const auto it = released_.find(name);
      VOLT_CHECK(it != released_.end(), Runtime,
                 "weight '" + name + "' was released with no way back (internal planning error)");
      Tensor t = it->second();
      owned_graph_->initializers[name] = t;
      released_.erase(it);
      ++initializer_changes_;
      return std::make_shared<const Value>(std::move(t));
    };
  const bool first = !built_a_plan_ && &cg == &compiled_;
  if (shape_generic && &cg == &compiled_ && !first_types_.empty()) in.first_types = &first_types_;
  const RunControlSuspended not_this_runs_memory;
  const bool warm_heap = shape_generic && !warmed_heap_;
  const size_t heap_before = warm_heap ? heap_bytes_in_use() : 0;
  auto plan = build_plan(cg, in, threads_);
  if (warm_heap) {
    // (A plan that takes most of its steps from the one before allocates little, and warms
    // little: GPT-2's step then faults a few hundred pages at two of the eight sizes
    // dynamic_shapes.py feeds it, where the 8 MiB a whole plan's footprint asks for cost its
    // first new shape 2.7 ms more, and the text classifier's 1.1 ms.)
    constexpr size_t kPlansAhead = 48;
    const size_t in_use = heap_bytes_in_use();
    warm_heap_for_plans(kPlansAhead * (in_use > heap_before ? in_use - heap_before : 0));
    warmed_heap_ = true;
  }
  if (first) {
    first_types_ = plan->types;
    initializer_changes_at_first_ = initializer_changes_;
  }
  built_a_plan_ = true;
  return plan;
}

std::vector<Value> GraphRunner::run(const std::vector<const Value*>& fed,
                                    const OutputObserver* observer) const {
  // (Not with an observer: it would have seen outputs of a run that ends in a mismatch.)
  const auto plan = plan_for(fed, observer == nullptr);
  if (!plan->serves_open_axes) return execute_plan(*plan, fed, observer);
  try {
    return execute_plan(*plan, fed);
  } catch (const OpenAxesMismatch&) {
    drop_open_plan();
  }
  return execute_plan(*plan_for(fed), fed, observer);
}

}  // namespace volt
