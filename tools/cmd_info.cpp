// volt info MODEL: format versions, inputs and outputs, op histogram, parameters.
#include <cstdio>
#include <map>

#include "loaders/loader.hpp"
#include "tools/cli_util.hpp"
#include "tools/commands.hpp"

namespace volt::cli {

namespace {
void count_ops(const Graph& g, std::map<std::string, int>& ops) {
  for (const auto& n : g.nodes) {
    ++ops[(n.domain == kOnnxDomain ? "" : n.domain + ".") + n.op_type];
    for (const auto& [_, a] : n.attributes) {
      if (a.g) count_ops(*a.g, ops);
      for (const auto& sg : a.graphs) count_ops(*sg, ops);
    }
  }
}
}  // namespace

int cmd_info(const Args& args) {
  const Model m = load_model(args.positional[0]);
  std::printf("model:     %s\n", m.source.c_str());
  std::printf("ir:        %lld\n", static_cast<long long>(m.ir_version));
  if (!m.producer_name.empty())
    std::printf("producer:  %s %s\n", m.producer_name.c_str(), m.producer_version.c_str());
  std::printf("opsets:   ");
  for (const auto& [domain, version] : m.opsets)
    std::printf(" %s=%lld", domain.c_str(), static_cast<long long>(version));
  std::printf("\ninputs:\n");
  for (const auto& v : m.graph.inputs)
    if (!m.graph.is_initializer(v.name))
      std::printf("  %-24s %s\n", v.name.c_str(), v.describe().c_str());
  std::printf("outputs:\n");
  for (const auto& v : m.graph.outputs)
    std::printf("  %-24s %s\n", v.name.c_str(), v.describe().c_str());
  std::map<std::string, int> ops;
  count_ops(m.graph, ops);
  size_t nodes = 0;
  for (const auto& [_, c] : ops) nodes += static_cast<size_t>(c);
  std::printf("ops:       %zu nodes\n", nodes);
  for (const auto& [op, c] : ops) std::printf("  %-24s %d\n", op.c_str(), c);
  int64_t params = 0;
  size_t bytes = 0;
  for (const auto& [_, t] : m.graph.initializers) {
    params += t.numel();
    bytes += t.nbytes();
  }
  std::printf("parameters: %lld in %zu initializers, %.3f MiB\n", static_cast<long long>(params),
              m.graph.initializers.size(), static_cast<double>(bytes) / (1024.0 * 1024.0));
  return 0;
}

}  // namespace volt::cli
