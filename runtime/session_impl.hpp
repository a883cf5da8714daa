// Session internals: the loaded model, its compiled graph and the per-shape plan cache.
#pragma once
#include <memory>
#include <mutex>
#include <string>

#include "runtime/graph_runner.hpp"
#include "volt/volt.hpp"

namespace volt {

struct Session::Impl {
  SessionOptions options;
  Model model;
  std::unique_ptr<GraphRunner> runner;  // the graph after passes
  std::vector<ValueInfo> inputs, outputs;
  ModelMetadata metadata;

  Impl(Model m, SessionOptions o);
  std::vector<Value> run(const NamedValues& inputs, const std::vector<std::string>& output_names,
                         const RunOptions& run_options);
};

}  // namespace volt
