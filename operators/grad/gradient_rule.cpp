#include "operators/grad/gradient_rule.hpp"

namespace volt {
namespace {
std::map<std::pair<std::string, std::string>, GradientRuleEntry>& rules() {
  static std::map<std::pair<std::string, std::string>, GradientRuleEntry> r;
  return r;
}
}  // namespace

void register_gradient_rule(const std::string& domain, const std::string& op, GradientRule rule,
                            Differentiable differentiable) {
  rules()[{canonical_domain(domain), op}] = {std::move(rule), std::move(differentiable)};
}

const GradientRuleEntry* find_gradient_rule(const std::string& domain, const std::string& op) {
  auto it = rules().find({canonical_domain(domain), op});
  return it == rules().end() ? nullptr : &it->second;
}

std::vector<std::pair<std::string, std::string>> gradient_rule_ops() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [key, _] : rules()) out.push_back(key);
  return out;
}

}  // namespace volt
