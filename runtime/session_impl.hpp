// Session internals: the loaded model, its compiled graph and the per-shape plan cache.
#pragma once
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "runtime/compiled_graph.hpp"
#include "runtime/plan.hpp"
#include "volt/volt.hpp"

namespace volt {

// Plans keyed by input signature, least recently used evicted past `capacity`.
class PlanCache {
 public:
  explicit PlanCache(size_t capacity) : capacity_(capacity) {}
  std::shared_ptr<const Plan> find(const std::string& key);
  std::shared_ptr<const Plan> insert(const std::string& key, std::shared_ptr<const Plan> plan);
  size_t size() const;

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const Plan>>;
  mutable std::mutex mutex_;
  size_t capacity_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
};

struct Session::Impl {
  SessionOptions options;
  Model model;
  std::shared_ptr<const Graph> graph;  // after passes
  CompiledGraph compiled;
  std::vector<ValueInfo> inputs, outputs;
  PlanCache plans{64};
  int threads = 1;

  Impl(Model m, SessionOptions o);
  std::vector<Value> run(const NamedValues& inputs, const std::vector<std::string>& output_names);
  // The plan for these fed values (built on first use of their signature).
  std::shared_ptr<const Plan> plan_for(const std::vector<const Value*>& fed);
};

}  // namespace volt
