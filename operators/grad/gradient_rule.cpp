#include "operators/grad/gradient_rule.hpp"

namespace volt {
namespace {
std::map<std::pair<std::string, std::string>, GradientRule>& rules() {
  static std::map<std::pair<std::string, std::string>, GradientRule> r;
  return r;
}
}  // namespace

void register_gradient_rule(const std::string& domain, const std::string& op, GradientRule rule) {
  rules()[{canonical_domain(domain), op}] = std::move(rule);
}

const GradientRule* find_gradient_rule(const std::string& domain, const std::string& op) {
  auto it = rules().find({canonical_domain(domain), op});
  return it == rules().end() ? nullptr : &it->second;
}

Attribute int_attr(int64_t v) {
  Attribute a;
  a.type = Attribute::Type::Int;
  a.i = v;
  return a;
}
Attribute ints_attr(std::vector<int64_t> v) {
  Attribute a;
  a.type = Attribute::Type::Ints;
  a.ints = std::move(v);
  return a;
}
Attribute float_attr(float v) {
  Attribute a;
  a.type = Attribute::Type::Float;
  a.f = v;
  return a;
}
Attribute string_attr(std::string v) {
  Attribute a;
  a.type = Attribute::Type::String;
  a.s = std::move(v);
  return a;
}

}  // namespace volt
