// Gradient rule of Einsum: the gradient of operand i is an Einsum too, of dY with the other
// operands, written to operand i's subscripts ("ab,bc->ac" gives dA = "ac,bc->ab"). Letters only
// operand i has (summed over it alone) come back by broadcasting; repeated letters within one
// operand (diagonals) are not supported yet.
#include <cctype>
#include <set>

#include "operators/grad/gradient_rule.hpp"
#include "runtime/error.hpp"

namespace volt {
namespace {

// "ab...c" as tokens: letters, and "..." as one token.
std::vector<std::string> tokens(const std::string& s, const Node& n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 3, "...") == 0) {
      out.push_back("...");
      i += 3;
    } else {
      VOLT_CHECK(std::isalpha(static_cast<unsigned char>(s[i])), InvalidModel,
                 n.describe() + ": bad Einsum equation '" + n.attr_string("equation", "") + "'");
      out.push_back(std::string(1, s[i++]));
    }
  }
  return out;
}

std::string joined(const std::vector<std::string>& t) {
  std::string s;
  for (const auto& x : t) s += x;
  return s;
}

void einsum(GradEmitter& e) {
  const Node& n = e.node();
  std::string eq;
  for (char c : n.attr_string("equation", ""))
    if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  std::vector<std::vector<std::string>> subs;
  {
    const std::string lhs = eq.substr(0, arrow);
    size_t start = 0;
    for (size_t comma; (comma = lhs.find(',', start)) != std::string::npos; start = comma + 1)
      subs.push_back(tokens(lhs.substr(start, comma - start), n));
    subs.push_back(tokens(lhs.substr(start), n));
  }
  VOLT_CHECK(subs.size() == n.inputs.size(), InvalidModel,
             n.describe() + ": the Einsum equation names " + std::to_string(subs.size()) +
                 " operands, the node has " + std::to_string(n.inputs.size()));
  std::vector<std::string> out;
  if (arrow != std::string::npos) {
    out = tokens(eq.substr(arrow + 2), n);
  } else {  // implicit: the letters seen once, in alphabetical order, after any ellipsis
    std::map<std::string, int> count;
    for (const auto& s : subs)
      for (const auto& t : s) ++count[t];
    if (count.count("...")) out.push_back("...");
    for (const auto& [t, k] : count)
      if (t != "..." && k == 1) out.push_back(t);
  }
  for (size_t i = 0; i < subs.size(); ++i) {
    if (!e.needs_grad(i)) continue;
    std::set<std::string> seen;
    for (const auto& t : subs[i])
      VOLT_CHECK(seen.insert(t).second || t == "...", NotImplemented,
                 n.describe() + ": the gradient of an Einsum with a repeated subscript ('" + t +
                     "', a diagonal) is not supported yet");
    // The letters the gradient can be written with: those of dY and of the other operands.
    std::set<std::string> known(out.begin(), out.end());
    std::vector<std::string> ins{e.grad_of_output(0)}, lhs{joined(out)};
    for (size_t j = 0; j < subs.size(); ++j) {
      if (j == i) continue;
      known.insert(subs[j].begin(), subs[j].end());
      ins.push_back(e.input(j));
      lhs.push_back(joined(subs[j]));
    }
    std::vector<std::string> target;
    std::vector<int64_t> missing;  // positions of operand i's own letters
    for (size_t k = 0; k < subs[i].size(); ++k) {
      if (known.count(subs[i][k])) {
        target.push_back(subs[i][k]);
      } else {
        VOLT_CHECK(std::find(subs[i].begin(), subs[i].end(), "...") == subs[i].end(),
                   NotImplemented,
                   n.describe() +
                       ": the gradient of an Einsum operand with both '...' and a "
                       "letter only it has is not supported yet");
        missing.push_back(static_cast<int64_t>(k));
      }
    }
    std::string equation;
    for (size_t k = 0; k < lhs.size(); ++k) equation += (k ? "," : "") + lhs[k];
    equation += "->" + joined(target);
    std::string g = e.emit1("Einsum", ins, {{"equation", string_attr(equation)}});
    if (!missing.empty()) {
      const int64_t m = static_cast<int64_t>(missing.size());
      g = e.emit1("Expand",
                  {e.emit1("Unsqueeze", {g, e.constant(Tensor::from<int64_t>(missing, {m}))}),
                   e.shape_of(e.input(i))});
    }
    e.set_grad(i, e.sum_to(g, e.input(i)));  // an operand broadcast under '...'
  }
}

}  // namespace

VOLT_REGISTER_GRADIENT(einsum, "Einsum", einsum);

}  // namespace volt
