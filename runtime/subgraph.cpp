// make_subgraph: a graph attribute run through its own GraphRunner. Values the body reads
// from enclosing graphs are fed by name from the owning node's run context.
#include <mutex>

#include "operators/kernel.hpp"
#include "runtime/graph_runner.hpp"

namespace volt {
namespace {

class GraphSubgraph final : public Subgraph {
 public:
  GraphSubgraph(std::shared_ptr<const Graph> body, const Node& owner)
      : body_(std::move(body)),
        source_("subgraph of " + owner.describe()),
        outer_(free_values(*body_)) {}

  size_t input_count() const override { return body_->inputs.size(); }
  size_t output_count() const override { return body_->outputs.size(); }

  std::vector<Value> run(const std::vector<Value>& inputs, const RunContext& ctx) const override {
    // Built on first use, with the thread count of the run that needs it.
    std::call_once(once_, [&] {
      runner_ = std::make_unique<GraphRunner>(body_, source_, "cpu", ctx.threads(), outer_);
    });
    const CompiledGraph& cg = runner_->compiled();
    VOLT_CHECK(inputs.size() <= cg.graph_inputs.size(), InvalidModel,
               source_ + ": given " + std::to_string(inputs.size()) +
                   " inputs, the body declares " + std::to_string(cg.graph_inputs.size()));
    std::vector<const Value*> fed(cg.names.size(), nullptr);
    for (size_t i = 0; i < inputs.size(); ++i) fed[cg.graph_inputs[i]] = &inputs[i];
    for (int id : cg.outer_scope) {
      const Value* v = ctx.captured(cg.names[id]);
      VOLT_CHECK(v, Runtime, source_ + ": enclosing value '" + cg.names[id] + "' is not available");
      fed[id] = v;
    }
    return runner_->run(fed);
  }

 private:
  std::shared_ptr<const Graph> body_;
  std::string source_;
  std::vector<std::string> outer_;
  mutable std::once_flag once_;
  mutable std::unique_ptr<GraphRunner> runner_;
};

}  // namespace

std::unique_ptr<Subgraph> make_subgraph(std::shared_ptr<const Graph> body, const Node& owner) {
  return std::make_unique<GraphSubgraph>(std::move(body), owner);
}

}  // namespace volt
