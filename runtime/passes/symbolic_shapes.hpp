// Shapes and small integer values as polynomials in the graph inputs' open dimensions: what
// fold_shape_arithmetic knows of a graph before any shape is fed. A dimension the model leaves
// open (a sentence's length T, a batch B) is a symbol; what ops compute from it (T * B, P + 1)
// stays exact, and anything not known exactly is unknown (nullopt), never a guess.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/graph.hpp"

namespace volt {

// A polynomial with int64 coefficients in symbols (ids into SymbolicGraph::symbols).
struct DimPoly {
  using Monomial = std::vector<int>;  // sorted symbol ids, repeated for powers
  std::map<Monomial, int64_t> terms;  // no zero coefficients; {} is 0

  static DimPoly constant(int64_t c);
  static DimPoly symbol(int id);
  std::optional<int64_t> as_constant() const;
  bool operator==(const DimPoly& o) const { return terms == o.terms; }
};
using SymDim = std::optional<DimPoly>;  // nullopt: unknown

SymDim add(const SymDim& a, const SymDim& b);
SymDim subtract(const SymDim& a, const SymDim& b);
SymDim multiply(const SymDim& a, const SymDim& b);
// a / b where it is exact for every value of the symbols (b a constant dividing every
// coefficient, or one term dividing every term); else unknown.
SymDim divide_exactly(const SymDim& a, const SymDim& b);

// What is known of one value.
struct SymbolicValue {
  DType dtype = DType::Undefined;
  bool rank_known = false;
  std::vector<SymDim> dims;
  // A scalar or 1-D integer (or integral float) tensor of a few elements: its elements, in order.
  bool has_elements = false;
  std::vector<SymDim> elements;

  bool elements_known() const;  // has_elements and none unknown
};

// Symbolic shapes for a graph's values: each open dimension of a graph input (one not fixed, of
// an input without an initializer) is a symbol of its own. Only the main graph's inputs are
// checked against their declared shapes when fed (runtime/feeds.cpp): a subgraph's declared
// shapes are not trusted, and its inputs are unknown.
class SymbolicGraph {
 public:
  SymbolicGraph(const Graph& g, bool trust_input_shapes);
  const SymbolicValue* find(const std::string& name) const;
  // The graph input and axis each symbol stands for.
  const std::vector<std::pair<std::string, int64_t>>& symbols() const { return symbols_; }

 private:
  void infer(const Node& n);
  std::vector<std::pair<std::string, int64_t>> symbols_;
  std::unordered_map<std::string, SymbolicValue> values_;
};

}  // namespace volt
