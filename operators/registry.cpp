#include "operators/registry.hpp"

#include <algorithm>
#include <set>

namespace volt {

bool KernelDef::accepts(std::span<const TypeShape* const> in_types) const {
  const size_t ti = static_cast<size_t>(type_input);
  if (!types.empty() && ti < in_types.size() && in_types[ti] &&
      std::find(types.begin(), types.end(), in_types[ti]->dtype) == types.end())
    return false;
  bool all_known = true;
  int64_t largest = 0;
  for (size_t i = 0; i < in_types.size(); ++i) {
    const bool sparse = in_types[i] && in_types[i]->kind == ValueInfo::Kind::SparseTensor;
    if (i == 0 && csr_input0 != sparse) return false;
    if (i > 0 && sparse) return false;
    if (!in_types[i] || min_elements == 0) continue;
    if (in_types[i]->shape_known)
      largest = std::max(largest, numel_of(in_types[i]->shape));
    else
      all_known = false;
  }
  if (min_elements > 0 && all_known && largest < min_elements) return false;
  return !(csr_input0 && in_types.empty());
}

KernelRegistry& KernelRegistry::instance() {
  static KernelRegistry registry;
  return registry;
}

void KernelRegistry::add(KernelDef def) {
  def.domain = canonical_domain(def.domain);
  // Kept ordered by priority (highest first), equal priorities in registration order.
  auto at = std::upper_bound(defs_.begin(), defs_.end(), def.priority,
                             [](int p, const auto& d) { return p > d->priority; });
  const KernelDef* added = defs_.insert(at, std::make_unique<KernelDef>(std::move(def)))->get();
  auto& named = by_op_[added->op];
  named.insert(std::upper_bound(named.begin(), named.end(), added->priority,
                                [](int p, const KernelDef* d) { return p > d->priority; }),
               added);
}

const std::vector<const KernelDef*>& KernelRegistry::named(const std::string& op_type) const {
  static const std::vector<const KernelDef*> none;
  const auto it = by_op_.find(op_type);
  return it == by_op_.end() ? none : it->second;
}

std::vector<const KernelDef*> KernelRegistry::candidates(const Node& node,
                                                         const std::string& device,
                                                         DType type) const {
  std::vector<const KernelDef*> out;
  for (const KernelDef* d : named(node.op_type)) {
    if (!d->matches(node, device)) continue;
    if (type != DType::Undefined && !d->types.empty() &&
        std::find(d->types.begin(), d->types.end(), type) == d->types.end())
      continue;
    out.push_back(d);
  }
  return out;
}

bool KernelRegistry::has_op(const std::string& domain, const std::string& op, int opset,
                            const std::string& device) const {
  for (const auto& d : defs_)
    if (d->op == op && d->domain == domain && d->device == device && opset >= d->since &&
        opset <= d->until)
      return true;
  return false;
}

std::vector<const KernelDef*> KernelRegistry::find(const std::string& domain, const std::string& op,
                                                   const std::string& device) const {
  std::vector<const KernelDef*> out;
  for (const auto& d : defs_)
    if (d->op == op && d->domain == domain && d->device == device) out.push_back(d.get());
  return out;
}

std::vector<std::pair<std::string, std::string>> KernelRegistry::ops() const {
  std::set<std::pair<std::string, std::string>> s;
  for (const auto& d : defs_) s.insert({d->domain, d->op});
  return {s.begin(), s.end()};
}

}  // namespace volt
