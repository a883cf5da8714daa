#include "operators/common/shape_formula.hpp"

#include "runtime/error.hpp"

namespace volt {

std::vector<int64_t> encode_shape_formula(const std::vector<FormulaElement>& elements) {
  std::vector<int64_t> code{static_cast<int64_t>(elements.size())};
  for (const FormulaElement& e : elements) {
    code.push_back(static_cast<int64_t>(e.size()));
    for (const FormulaTerm& t : e) {
      code.push_back(t.coefficient);
      code.push_back(static_cast<int64_t>(t.factors.size()));
      for (const auto& [input, axis] : t.factors) {
        code.push_back(input);
        code.push_back(axis);
      }
    }
  }
  return code;
}

std::vector<FormulaElement> decode_shape_formula(std::span<const int64_t> code, size_t inputs,
                                                 const std::string& what) {
  size_t at = 0;
  auto next = [&](int64_t lo, int64_t hi) {
    VOLT_CHECK(at < code.size(), InvalidModel, what + ": the formula ends early");
    const int64_t v = code[at++];
    VOLT_CHECK(v >= lo && v <= hi, InvalidModel,
               what + ": formula entry " + std::to_string(at - 1) + " is out of range");
    return v;
  };
  constexpr int64_t kMaxCount = 1 << 16;
  std::vector<FormulaElement> elements(static_cast<size_t>(next(0, kMaxCount)));
  for (FormulaElement& e : elements) {
    e.resize(static_cast<size_t>(next(0, kMaxCount)));
    for (FormulaTerm& t : e) {
      t.coefficient = next(INT64_MIN, INT64_MAX);
      t.factors.resize(static_cast<size_t>(next(0, 64)));
      for (auto& [input, axis] : t.factors) {
        input = next(0, static_cast<int64_t>(inputs) - 1);
        axis = next(0, 63);
      }
    }
  }
  VOLT_CHECK(at == code.size(), InvalidModel, what + ": the formula has trailing entries");
  return elements;
}

std::vector<int64_t> evaluate_shape_formula(const std::vector<FormulaElement>& elements,
                                            std::span<const Shape* const> shapes,
                                            const std::string& what) {
  std::vector<int64_t> values;
  values.reserve(elements.size());
  for (const FormulaElement& e : elements) {
    int64_t sum = 0;
    for (const FormulaTerm& t : e) {
      int64_t product = t.coefficient;
      for (const auto& [input, axis] : t.factors) {
        const Shape* s = shapes[static_cast<size_t>(input)];
        VOLT_CHECK(
            s && axis < static_cast<int64_t>(s->size()), InvalidArgument,
            what + ": input " + std::to_string(input) + " has no axis " + std::to_string(axis));
        VOLT_CHECK(!__builtin_mul_overflow(product, (*s)[static_cast<size_t>(axis)], &product),
                   InvalidArgument, what + ": a dimension product overflows int64");
      }
      VOLT_CHECK(!__builtin_add_overflow(sum, product, &sum), InvalidArgument,
                 what + ": a dimension sum overflows int64");
    }
    values.push_back(sum);
  }
  return values;
}

}  // namespace volt
