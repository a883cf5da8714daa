#include "runtime/passes/symbolic_shapes.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include "operators/common/slice_window.hpp"
#include "operators/cpu/conv_geometry.hpp"
#include "runtime/error.hpp"
#include "runtime/passes/passes.hpp"

namespace volt {

// --- polynomials ---------------------------------------------------------------------------------

DimPoly DimPoly::constant(int64_t c) {
  DimPoly p;
  if (c != 0) p.terms[{}] = c;
  return p;
}

DimPoly DimPoly::symbol(int id) {
  DimPoly p;
  p.terms[{id}] = 1;
  return p;
}

std::optional<int64_t> DimPoly::as_constant() const {
  if (terms.empty()) return 0;
  if (terms.size() == 1 && terms.begin()->first.empty()) return terms.begin()->second;
  return std::nullopt;
}

namespace {

SymDim combine(const SymDim& a, const SymDim& b, int64_t sign) {
  if (!a || !b) return std::nullopt;
  DimPoly r = *a;
  for (const auto& [m, c] : b->terms) {
    int64_t scaled = 0, sum = 0;
    if (__builtin_mul_overflow(c, sign, &scaled)) return std::nullopt;
    auto it = r.terms.find(m);
    if (it == r.terms.end()) {
      r.terms[m] = scaled;
      continue;
    }
    if (__builtin_add_overflow(it->second, scaled, &sum)) return std::nullopt;
    if (sum == 0)
      r.terms.erase(it);
    else
      it->second = sum;
  }
  return r;
}

}  // namespace

SymDim add(const SymDim& a, const SymDim& b) {
  return combine(a, b, 1);
}

SymDim subtract(const SymDim& a, const SymDim& b) {
  return combine(a, b, -1);
}

SymDim multiply(const SymDim& a, const SymDim& b) {
  if (!a || !b) return std::nullopt;
  SymDim r = DimPoly{};
  for (const auto& [ma, ca] : a->terms)
    for (const auto& [mb, cb] : b->terms) {
      DimPoly t;
      int64_t c = 0;
      if (__builtin_mul_overflow(ca, cb, &c)) return std::nullopt;
      DimPoly::Monomial m = ma;
      m.insert(m.end(), mb.begin(), mb.end());
      std::sort(m.begin(), m.end());
      t.terms[m] = c;
      r = add(r, t);
      if (!r) return std::nullopt;
    }
  return r;
}

SymDim divide_exactly(const SymDim& a, const SymDim& b) {
  if (!a || !b || b->terms.size() != 1) return std::nullopt;
  const auto& [mb, cb] = *b->terms.begin();
  if (cb == 0) return std::nullopt;
  DimPoly r;
  for (const auto& [ma, ca] : a->terms) {
    if ((ca == INT64_MIN && cb == -1) || ca % cb != 0) return std::nullopt;
    // mb's symbols must all be in ma (as a multiset).
    DimPoly::Monomial rest;
    if (!std::includes(ma.begin(), ma.end(), mb.begin(), mb.end())) return std::nullopt;
    std::set_difference(ma.begin(), ma.end(), mb.begin(), mb.end(), std::back_inserter(rest));
    r.terms[rest] = ca / cb;
  }
  return r;
}

bool SymbolicValue::elements_known() const {
  return has_elements && std::all_of(elements.begin(), elements.end(),
                                     [](const SymDim& d) { return d.has_value(); });
}

// --- inference -----------------------------------------------------------------------------------

namespace {

constexpr size_t kMaxElements = 64;
// Slice ends at or past this reach the end of any axis (exporters write INT64_MAX or INT32_MAX).
constexpr int64_t kToTheEnd = INT32_MAX;

bool tracks_elements(DType t) {
  return t == DType::Int64 || t == DType::Int32 || t == DType::Float || t == DType::Double;
}

SymDim known(int64_t c) {
  return DimPoly::constant(c);
}

std::optional<int64_t> constant_of(const SymDim& d) {
  return d ? d->as_constant() : std::nullopt;
}

SymbolicValue with_dims(DType dtype, std::vector<SymDim> dims) {
  SymbolicValue v;
  v.dtype = dtype;
  v.rank_known = true;
  v.dims = std::move(dims);
  return v;
}

// `x` with new dimensions (Reshape, Squeeze, Transpose ...): its elements stay where it stays a
// scalar or 1-D.
SymbolicValue reshaped(const SymbolicValue& x, std::vector<SymDim> dims) {
  SymbolicValue v = with_dims(x.dtype, std::move(dims));
  if (x.has_elements && v.dims.size() <= 1) {
    v.has_elements = true;
    v.elements = x.elements;
  }
  return v;
}

SymbolicValue vector_of(DType dtype, std::vector<SymDim> elements) {
  SymbolicValue v = with_dims(dtype, {known(static_cast<int64_t>(elements.size()))});
  v.has_elements = tracks_elements(dtype) && elements.size() <= kMaxElements;
  if (v.has_elements) v.elements = std::move(elements);
  return v;
}

SymbolicValue from_tensor(const Tensor& t) {
  std::vector<SymDim> dims;
  for (int64_t d : t.shape()) dims.push_back(known(d));
  SymbolicValue v = with_dims(t.dtype(), std::move(dims));
  if (!tracks_elements(t.dtype()) || t.rank() > 1 || t.numel() > int64_t{kMaxElements}) return v;
  v.has_elements = true;
  for (int64_t i = 0; i < t.numel(); ++i) {
    double x = 0;
    switch (t.dtype()) {
      case DType::Int64:
        v.elements.push_back(known(t.data<int64_t>()[i]));
        continue;
      case DType::Int32:
        v.elements.push_back(known(t.data<int32_t>()[i]));
        continue;
      case DType::Float:
        x = t.data<float>()[i];
        break;
      default:
        x = t.data<double>()[i];
        break;
    }
    // Float elements are tracked where they hold integers (shape arithmetic done in float).
    const bool integral = std::isfinite(x) && std::fabs(x) < 9.0e15 && x == std::floor(x);
    v.elements.push_back(integral ? known(static_cast<int64_t>(x)) : SymDim{});
  }
  return v;
}

SymDim product(const std::vector<SymDim>& dims, size_t from, size_t to) {
  SymDim p = known(1);
  for (size_t i = from; i < to; ++i) p = multiply(p, dims[i]);
  return p;
}

// numpy broadcasting of one dimension: equal ones, or a known 1 against anything.
SymDim broadcast_dim(const SymDim& a, const SymDim& b) {
  if (a && b && *a == *b) return a;
  if (constant_of(a) == 1) return b;
  if (constant_of(b) == 1) return a;
  return std::nullopt;
}

std::optional<std::vector<SymDim>> broadcast(const std::vector<const SymbolicValue*>& in) {
  size_t rank = 0;
  for (const SymbolicValue* v : in) {
    if (!v->rank_known) return std::nullopt;
    rank = std::max(rank, v->dims.size());
  }
  std::vector<SymDim> out(rank, known(1));
  for (const SymbolicValue* v : in)
    for (size_t i = 0; i < v->dims.size(); ++i) {
      const size_t at = rank - v->dims.size() + i;
      out[at] = broadcast_dim(out[at], v->dims[i]);
    }
  return out;
}

std::optional<int64_t> axis_in(int64_t axis, size_t rank, bool inclusive = false) {
  const int64_t r = static_cast<int64_t>(rank) + (inclusive ? 1 : 0);
  if (axis < -r || axis >= r) return std::nullopt;
  return axis < 0 ? axis + r : axis;
}

// A value's elements as constants (axes, starts, a Gather's indices), when all are known.
std::optional<std::vector<int64_t>> constants(const SymbolicValue& v) {
  if (!v.elements_known()) return std::nullopt;
  std::vector<int64_t> out;
  for (const SymDim& d : v.elements) {
    const auto c = constant_of(d);
    if (!c) return std::nullopt;
    out.push_back(*c);
  }
  return out;
}

// Elementwise arithmetic over tracked elements (a scalar or one of equal length broadcasts).
std::optional<std::vector<SymDim>> elementwise(const SymbolicValue& a, const SymbolicValue& b,
                                               const std::function<SymDim(SymDim, SymDim)>& f) {
  if (!a.has_elements || !b.has_elements) return std::nullopt;
  const size_t na = a.elements.size(), nb = b.elements.size();
  if (na != nb && na != 1 && nb != 1) return std::nullopt;
  std::vector<SymDim> out(std::max(na, nb));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = f(a.elements[na == 1 ? 0 : i], b.elements[nb == 1 ? 0 : i]);
  return out;
}

SymDim divide(const SymDim& a, const SymDim& b, bool integer) {
  const SymDim exact = divide_exactly(a, b);
  if (exact || !integer) return exact;
  const auto ca = constant_of(a), cb = constant_of(b);
  // Integer division of non-negative constants (truncation and floor agree there).
  if (ca && cb && *ca >= 0 && *cb > 0) return known(*ca / *cb);
  return std::nullopt;
}

SymDim extreme(const SymDim& a, const SymDim& b, bool max) {
  const auto ca = constant_of(a), cb = constant_of(b);
  if (ca && cb) return known(max ? std::max(*ca, *cb) : std::min(*ca, *cb));
  if (a && b && *a == *b) return a;
  return std::nullopt;
}

bool is_integer(DType t) {
  return t == DType::Int64 || t == DType::Int32;
}

// Slice's window on one axis of length `dim`: its length, where it is known exactly, and its
// first index. A constant length takes the Slice kernel's own window (slice_window); a symbolic
// one only the whole axis, forwards or backwards.
struct AxisWindow {
  SymDim length;
  int64_t first = 0;
};
AxisWindow slice_axis(const SymDim& dim, int64_t start, int64_t end, int64_t step,
                      const Node& node) {
  if (const auto n = constant_of(dim)) try {
      const SliceWindow w = slice_window(Shape{*n}, {start}, {end}, {0}, {step}, node);
      return {known(w.out[0]), w.start[0]};
    } catch (const Error&) {
      return {};  // (the kernel reports it when the plan is made)
    }
  if (step == 1 && start == 0 && end >= kToTheEnd) return {dim, 0};
  if (step == -1 && (start == -1 || start >= kToTheEnd) && end <= -kToTheEnd) return {dim, 0};
  return {};
}

}  // namespace

SymbolicGraph::SymbolicGraph(const Graph& g, bool trust_input_shapes) {
  for (const auto& [name, t] : g.initializers) values_[name] = from_tensor(t);
  for (const ValueInfo& in : g.inputs) {
    SymbolicValue v;
    v.dtype = in.dtype;
    // An initializer the caller may override, or a subgraph's input: nothing is known.
    if (g.initializers.count(in.name) || !trust_input_shapes || !in.has_shape ||
        in.kind != ValueInfo::Kind::Tensor) {
      values_[in.name] = v;
      continue;
    }
    v.rank_known = true;
    for (size_t axis = 0; axis < in.shape.size(); ++axis) {
      if (in.shape[axis].is_fixed()) {
        v.dims.push_back(known(in.shape[axis].value));
        continue;
      }
      v.dims.push_back(DimPoly::symbol(static_cast<int>(symbols_.size())));
      symbols_.emplace_back(in.name, static_cast<int64_t>(axis));
    }
    values_[in.name] = v;
  }
  for (const Node& n : g.nodes) infer(n);
}

const SymbolicValue* SymbolicGraph::find(const std::string& name) const {
  auto it = values_.find(name);
  return it == values_.end() ? nullptr : &it->second;
}

void SymbolicGraph::infer(const Node& n) {
  static const SymbolicValue kUnknown;
  std::vector<const SymbolicValue*> in;
  for (const std::string& name : n.inputs) {
    const SymbolicValue* v = name.empty() ? nullptr : find(name);
    in.push_back(v ? v : &kUnknown);
  }
  std::vector<SymbolicValue> out(n.outputs.size());
  auto set = [&](SymbolicValue v) {
    if (!out.empty()) out[0] = std::move(v);
  };
  auto input = [&](size_t i) -> const SymbolicValue& { return i < in.size() ? *in[i] : kUnknown; };
  auto given = [&](size_t i) { return n.has_input(i); };
  bool subgraph = false;
  for (const auto& [key, a] : n.attributes)
    subgraph |= a.type == Attribute::Type::Graph || a.type == Attribute::Type::Graphs;
  const std::string& op = n.op_type;
  const SymbolicValue& x = input(0);

  static const std::set<std::string> kSameShape = {"Relu",
                                                   "Sigmoid",
                                                   "Tanh",
                                                   "Erf",
                                                   "Exp",
                                                   "Log",
                                                   "Sqrt",
                                                   "Abs",
                                                   "Neg",
                                                   "Reciprocal",
                                                   "Floor",
                                                   "Ceil",
                                                   "Round",
                                                   "Sign",
                                                   "Softmax",
                                                   "LogSoftmax",
                                                   "Hardmax",
                                                   "LayerNormalization",
                                                   "BatchNormalization",
                                                   "InstanceNormalization",
                                                   "Dropout",
                                                   "Identity",
                                                   "Gelu",
                                                   "LeakyRelu",
                                                   "Elu",
                                                   "Selu",
                                                   "Celu",
                                                   "HardSigmoid",
                                                   "HardSwish",
                                                   "Softplus",
                                                   "Softsign",
                                                   "Mish",
                                                   "Clip",
                                                   "Not",
                                                   "IsNaN",
                                                   "IsInf",
                                                   "Cos",
                                                   "Sin",
                                                   "CumSum",
                                                   "LRN",
                                                   "Shrink",
                                                   "ThresholdedRelu",
                                                   "Trilu",
                                                   "MeanVarianceNormalization",
                                                   "Cast",
                                                   "CastLike"};
  static const std::set<std::string> kBroadcast = {
      "Add",   "Sub",      "Mul",  "Div",         "Pow",     "Mod",
      "Max",   "Min",      "Sum",  "Mean",        "And",     "Or",
      "Xor",   "Equal",    "Less", "LessOrEqual", "Greater", "GreaterOrEqual",
      "PRelu", "BitShift", "Where"};
  static const std::set<std::string> kCompare = {
      "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And",
      "Or",    "Xor",  "Not",         "IsNaN",   "IsInf"};
  static const std::set<std::string> kPools = {
      "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"};
  static const std::set<std::string> kReduce = {
      "ReduceMean", "ReduceSum",    "ReduceMax",       "ReduceMin",       "ReduceProd", "ReduceL1",
      "ReduceL2",   "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax",     "ArgMin"};

  if (n.domain != kOnnxDomain || subgraph || n.outputs.empty()) {
    // unknown outputs
  } else if (op == "Constant") {
    if (const Tensor* t = n.has_attr("value") ? &n.attr_tensor("value") : nullptr)
      set(from_tensor(*t));
  } else if (kSameShape.count(op)) {
    SymbolicValue v = x;
    if (op == "Cast") v.dtype = static_cast<DType>(n.attr_int("to", 0));
    if (op == "CastLike") v.dtype = input(1).dtype;
    if (kCompare.count(op)) v.dtype = DType::Bool;
    const bool keeps_elements = op == "Identity" || op == "Cast" || op == "CastLike" ||
                                op == "Floor" || op == "Ceil" || op == "Round" || op == "Neg";
    if (!keeps_elements || !tracks_elements(v.dtype)) {
      v.has_elements = false;
      v.elements.clear();
    } else if (op == "Neg") {
      for (SymDim& e : v.elements) e = subtract(known(0), e);
    }
    set(std::move(v));
  } else if (kBroadcast.count(op)) {
    std::vector<const SymbolicValue*> operands;
    for (size_t i = 0; i < in.size(); ++i)
      if (given(i)) operands.push_back(in[i]);
    if (const auto dims = broadcast(operands)) {
      const DType dtype = kCompare.count(op) ? DType::Bool
                          : op == "Where"    ? input(1).dtype
                                             : x.dtype;
      SymbolicValue v = with_dims(dtype, *dims);
      std::optional<std::vector<SymDim>> e;
      const bool integer = is_integer(dtype);
      if (in.size() == 2 && dims->size() <= 1 && tracks_elements(dtype)) {
        const SymbolicValue &a = *in[0], &b = *in[1];
        if (op == "Add") e = elementwise(a, b, add);
        if (op == "Sub") e = elementwise(a, b, subtract);
        if (op == "Mul") e = elementwise(a, b, multiply);
        if (op == "Div")
          e = elementwise(a, b, [&](SymDim p, SymDim q) { return divide(p, q, integer); });
        if (op == "Max" || op == "Min")
          e = elementwise(a, b, [&](SymDim p, SymDim q) { return extreme(p, q, op == "Max"); });
      }
      if (e &&
          e->size() ==
              (dims->empty() ? 1u : static_cast<size_t>(constant_of((*dims)[0]).value_or(-1)))) {
        v.has_elements = true;
        v.elements = std::move(*e);
      }
      set(std::move(v));
    }
  } else if (op == "Shape") {
    SymbolicValue v = with_dims(DType::Int64, {std::nullopt});
    if (x.rank_known) {
      const int64_t r = static_cast<int64_t>(x.dims.size());
      auto clamp = [r](int64_t a) { return std::clamp<int64_t>(a < 0 ? a + r : a, 0, r); };
      const int64_t b = clamp(n.attr_int("start", 0)), e = clamp(n.attr_int("end", INT64_MAX));
      v = vector_of(DType::Int64,
                    std::vector<SymDim>(x.dims.begin() + b, x.dims.begin() + std::max(b, e)));
    }
    set(std::move(v));
  } else if (op == "Size") {
    SymbolicValue v = with_dims(DType::Int64, {});
    if (x.rank_known) {
      v.has_elements = true;
      v.elements = {product(x.dims, 0, x.dims.size())};
    }
    set(std::move(v));
  } else if (op == "Gather") {
    const SymbolicValue& idx = input(1);
    const auto axis = x.rank_known ? axis_in(n.attr_int("axis", 0), x.dims.size()) : std::nullopt;
    if (axis && idx.rank_known) {
      std::vector<SymDim> dims(x.dims.begin(), x.dims.begin() + *axis);
      dims.insert(dims.end(), idx.dims.begin(), idx.dims.end());
      dims.insert(dims.end(), x.dims.begin() + *axis + 1, x.dims.end());
      SymbolicValue v = with_dims(x.dtype, dims);
      const auto picks = constants(idx);
      if (x.has_elements && x.dims.size() == 1 && idx.dims.size() <= 1 && picks) {
        const int64_t len = static_cast<int64_t>(x.elements.size());
        v.has_elements = true;
        for (int64_t p : *picks) {
          if (p < -len || p >= len) {
            v.has_elements = false;
            break;
          }
          v.elements.push_back(x.elements[static_cast<size_t>(p < 0 ? p + len : p)]);
        }
        if (!v.has_elements) v.elements.clear();
      }
      set(std::move(v));
    }
  } else if (op == "Unsqueeze" || op == "Squeeze") {
    std::optional<std::vector<int64_t>> axes;
    const bool from_input = n.opset >= 13;
    if (!from_input && n.has_attr("axes")) axes = n.attr_ints("axes");
    if (from_input && given(1)) axes = constants(input(1));
    if (x.rank_known &&
        (axes || (op == "Squeeze" && !(from_input ? given(1) : n.has_attr("axes"))))) {
      std::vector<SymDim> dims;
      bool ok = true;
      if (op == "Unsqueeze") {
        const size_t rank = x.dims.size() + axes->size();
        std::vector<char> inserted(rank, 0);
        for (int64_t a : *axes) {
          const auto at = axis_in(a, rank);
          ok = ok && at && !inserted[static_cast<size_t>(*at)];
          if (ok) inserted[static_cast<size_t>(*at)] = 1;
        }
        for (size_t i = 0, j = 0; ok && i < rank; ++i)
          dims.push_back(inserted[i] ? known(1) : x.dims[j++]);
      } else {
        std::vector<char> removed(x.dims.size(), 0);
        if (axes) {
          for (int64_t a : *axes) {
            const auto at = axis_in(a, x.dims.size());
            ok = ok && at && constant_of(x.dims[static_cast<size_t>(*at)]) == 1;
            if (ok) removed[static_cast<size_t>(*at)] = 1;
          }
        } else {
          for (size_t i = 0; i < x.dims.size(); ++i) {
            const auto c = constant_of(x.dims[i]);
            ok = ok && c.has_value();  // a symbol might be 1 or not
            removed[i] = c == 1;
          }
        }
        for (size_t i = 0; ok && i < x.dims.size(); ++i)
          if (!removed[i]) dims.push_back(x.dims[i]);
      }
      if (ok) set(reshaped(x, dims));
    }
  } else if (op == "Concat") {
    bool ok = x.rank_known && !x.dims.empty();
    for (size_t i = 0; ok && i < in.size(); ++i)
      ok = given(i) && in[i]->rank_known && in[i]->dims.size() == x.dims.size();
    const auto axis = ok ? axis_in(n.attr_int("axis", 0), x.dims.size()) : std::nullopt;
    if (axis) {
      // Every other axis must agree across the inputs (or the op fails): the first one's.
      std::vector<SymDim> dims = x.dims;
      bool elements = x.dims.size() == 1;
      for (size_t i = 1; i < in.size(); ++i)
        dims[static_cast<size_t>(*axis)] =
            add(dims[static_cast<size_t>(*axis)], in[i]->dims[static_cast<size_t>(*axis)]);
      for (const SymbolicValue* v : in) elements = elements && v->has_elements;
      SymbolicValue v = with_dims(x.dtype, dims);
      if (elements && tracks_elements(x.dtype)) {
        for (const SymbolicValue* p : in)
          v.elements.insert(v.elements.end(), p->elements.begin(), p->elements.end());
        v.has_elements = v.elements.size() <= kMaxElements;
        if (!v.has_elements) v.elements.clear();
      }
      set(std::move(v));
    }
  } else if (op == "Reshape") {
    std::optional<std::vector<SymDim>> target;
    if (n.opset < 5 && n.has_attr("shape")) {
      target.emplace();
      for (int64_t d : n.attr_ints("shape")) target->push_back(known(d));
    } else if (input(1).has_elements && input(1).rank_known && input(1).dims.size() == 1) {
      target = input(1).elements;
    }
    if (target) {
      const bool allowzero = n.attr_int("allowzero", 0) != 0;
      std::vector<SymDim> dims;
      std::optional<size_t> infer_at;
      bool ok = true;
      for (size_t i = 0; i < target->size(); ++i) {
        const auto c = constant_of((*target)[i]);
        if (c == 0 && !allowzero) {
          dims.push_back(x.rank_known && i < x.dims.size() ? x.dims[i] : SymDim{});
        } else if (c == -1) {
          ok = ok && !infer_at;
          infer_at = i;
          dims.push_back(std::nullopt);
        } else {
          dims.push_back((*target)[i]);
        }
      }
      if (ok && infer_at && x.rank_known) {
        std::vector<SymDim> rest = dims;
        rest.erase(rest.begin() + static_cast<int64_t>(*infer_at));
        dims[*infer_at] =
            divide_exactly(product(x.dims, 0, x.dims.size()), product(rest, 0, rest.size()));
      }
      if (ok) set(reshaped(x, dims));
    }
  } else if (op == "Flatten") {
    const auto axis =
        x.rank_known ? axis_in(n.attr_int("axis", 1), x.dims.size(), true) : std::nullopt;
    if (axis)
      set(with_dims(x.dtype, {product(x.dims, 0, static_cast<size_t>(*axis)),
                              product(x.dims, static_cast<size_t>(*axis), x.dims.size())}));
  } else if (op == "Transpose") {
    if (x.rank_known) {
      std::vector<int64_t> perm = n.attr_ints("perm");
      if (perm.empty())
        for (size_t i = x.dims.size(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
      bool ok = perm.size() == x.dims.size();
      std::vector<SymDim> dims;
      for (int64_t p : perm) {
        ok = ok && p >= 0 && p < static_cast<int64_t>(x.dims.size());
        if (ok) dims.push_back(x.dims[static_cast<size_t>(p)]);
      }
      if (ok) set(reshaped(x, dims));
    }
  } else if (op == "Slice") {
    std::optional<std::vector<int64_t>> starts, ends, axes, steps;
    if (n.opset < 10) {
      starts = n.attr_ints("starts");
      ends = n.attr_ints("ends");
      if (n.has_attr("axes")) axes = n.attr_ints("axes");
    } else {
      starts = constants(input(1));
      ends = constants(input(2));
      if (given(3)) axes = constants(input(3));
      if (given(4)) steps = constants(input(4));
    }
    bool ok = x.rank_known && starts && ends && starts->size() == ends->size() &&
              (!given(3) || axes) && (!given(4) || steps);
    if (ok) {
      if (!axes) {  // every axis from the first, in order
        axes = std::vector<int64_t>(starts->size());
        for (size_t i = 0; i < starts->size(); ++i) (*axes)[i] = static_cast<int64_t>(i);
      }
      if (!steps) steps = std::vector<int64_t>(starts->size(), 1);
      ok = axes->size() == starts->size() && steps->size() == starts->size();
    }
    if (ok) {
      std::vector<SymDim> dims = x.dims;
      std::vector<int64_t> first(x.dims.size(), 0), st(x.dims.size(), 1);
      for (size_t i = 0; ok && i < axes->size(); ++i) {
        const auto a = axis_in((*axes)[i], x.dims.size());
        ok = a.has_value();
        if (!ok) break;
        const size_t at = static_cast<size_t>(*a);
        const AxisWindow w = slice_axis(x.dims[at], (*starts)[i], (*ends)[i], (*steps)[i], n);
        dims[at] = w.length;
        first[at] = w.first;
        st[at] = (*steps)[i];
      }
      if (ok) {
        SymbolicValue v = with_dims(x.dtype, dims);
        const auto len = dims.size() == 1 ? constant_of(dims[0]) : std::nullopt;
        if (x.has_elements && len &&
            x.elements.size() == static_cast<size_t>(constant_of(x.dims[0]).value_or(-1))) {
          // The window's elements, from its first index in `len` steps (within x by
          // slice_window's clamping; checked all the same).
          const int64_t size = static_cast<int64_t>(x.elements.size());
          v.has_elements = true;
          for (int64_t k = 0; k < *len && v.has_elements; ++k) {
            const int64_t at = first[0] + k * st[0];
            v.has_elements = at >= 0 && at < size;
            if (v.has_elements) v.elements.push_back(x.elements[static_cast<size_t>(at)]);
          }
          if (!v.has_elements) v.elements.clear();
        }
        set(std::move(v));
      }
    }
  } else if (op == "Expand") {
    const SymbolicValue& shape = input(1);
    if (shape.has_elements && shape.rank_known && shape.dims.size() == 1) {
      SymbolicValue target = with_dims(x.dtype, shape.elements);
      if (const auto dims = broadcast({&x, &target})) set(with_dims(x.dtype, *dims));
    }
  } else if (op == "ConstantOfShape") {
    const SymbolicValue& shape = input(0);
    const DType dtype = n.has_attr("value") ? n.attr_tensor("value").dtype() : DType::Float;
    if (shape.has_elements) set(with_dims(dtype, shape.elements));
  } else if (op == "Range") {
    const SymbolicValue &start = input(0), &limit = input(1), &delta = input(2);
    SymDim length;
    if (start.has_elements && limit.has_elements && delta.has_elements &&
        start.elements.size() == 1 && limit.elements.size() == 1 && delta.elements.size() == 1) {
      const SymDim span = subtract(limit.elements[0], start.elements[0]);
      const auto step = constant_of(delta.elements[0]);
      const auto c = constant_of(span);
      if (c && step && *step != 0) {
        const int64_t q = *c / *step + ((*c % *step != 0) && ((*c > 0) == (*step > 0)) ? 1 : 0);
        length = known(std::max<int64_t>(0, q));
      } else if (step == 1 && span &&
                 std::all_of(span->terms.begin(), span->terms.end(),
                             [](const auto& t) { return t.second > 0; })) {
        length = span;  // a sum of non-negative terms: never clamped to 0
      }
    }
    set(with_dims(x.dtype, {length}));
  } else if (op == "MatMul") {
    const SymbolicValue& b = input(1);
    if (x.rank_known && b.rank_known && !x.dims.empty() && !b.dims.empty()) {
      std::vector<SymDim> ad = x.dims, bd = b.dims;
      const bool a1 = ad.size() == 1, b1 = bd.size() == 1;
      if (a1) ad.insert(ad.begin(), known(1));
      if (b1) bd.push_back(known(1));
      SymbolicValue ab = with_dims(x.dtype, {ad.begin(), ad.end() - 2});
      SymbolicValue bb = with_dims(x.dtype, {bd.begin(), bd.end() - 2});
      if (const auto batch = broadcast({&ab, &bb})) {
        std::vector<SymDim> dims = *batch;
        if (!a1) dims.push_back(ad[ad.size() - 2]);
        if (!b1) dims.push_back(bd.back());
        set(with_dims(x.dtype, dims));
      }
    }
  } else if (op == "Gemm") {
    const SymbolicValue& b = input(1);
    if (x.rank_known && b.rank_known && x.dims.size() == 2 && b.dims.size() == 2)
      set(with_dims(x.dtype, {x.dims[n.attr_int("transA", 0) ? 1 : 0],
                              b.dims[n.attr_int("transB", 0) ? 0 : 1]}));
  } else if (op == "Conv" || kPools.count(op)) {
    // N, then the output channels (W's first dimension for a Conv), then the window's output
    // sizes where X's are constants (the kernels' own geometry, resolve_window).
    const bool global = op.rfind("Global", 0) == 0;
    const SymbolicValue& w = input(1);
    const bool conv = op == "Conv";
    if (x.rank_known && x.dims.size() >= 3 && (!conv || (w.rank_known && w.dims.size() >= 3))) {
      const size_t spatial = x.dims.size() - 2;
      std::vector<SymDim> dims = {x.dims[0], conv ? w.dims[0] : x.dims[1]};
      std::vector<int64_t> in_sizes, kernel;
      bool constant = true;
      for (size_t i = 0; i < spatial; ++i) {
        const auto c = constant_of(x.dims[2 + i]);
        constant = constant && c.has_value();
        in_sizes.push_back(c.value_or(0));
        const auto k = conv ? constant_of(w.dims[2 + i]) : std::nullopt;
        constant = constant && (!conv || k.has_value());
        kernel.push_back(k.value_or(0));
      }
      if (!conv && !global) kernel = n.attr_ints("kernel_shape");
      std::vector<SymDim> out_sizes(spatial, global ? known(1) : SymDim{});
      if (constant && !global) try {
          const WindowGeometry g = resolve_window(WindowAttributes(n), in_sizes, kernel, n);
          for (size_t i = 0; i < spatial; ++i) out_sizes[i] = known(g.out[i]);
        } catch (const Error&) {
          // (the kernel reports it when the plan is made)
        }
      dims.insert(dims.end(), out_sizes.begin(), out_sizes.end());
      for (SymbolicValue& o : out) o = with_dims(x.dtype, dims);  // (MaxPool's indices too)
      if (out.size() > 1) out[1].dtype = DType::Int64;
    }
  } else if (kReduce.count(op)) {
    const bool arg = op == "ArgMax" || op == "ArgMin";
    std::optional<std::vector<int64_t>> axes;
    const bool from_input = !arg && n.opset >= (op == "ReduceSum" ? 13 : 18);
    bool reduce_all = false, noop = false;
    if (arg) {
      axes = std::vector<int64_t>{n.attr_int("axis", 0)};
    } else if (from_input) {
      if (given(1))
        axes = constants(input(1));
      else if (n.attr_int("noop_with_empty_axes", 0))
        noop = true;
      else
        reduce_all = true;
    } else if (n.has_attr("axes")) {
      axes = n.attr_ints("axes");
    } else {
      reduce_all = true;
    }
    if (x.rank_known && (axes || reduce_all || noop)) {
      const bool keep = n.attr_int("keepdims", 1) != 0;
      std::vector<char> reduced(x.dims.size(), reduce_all ? 1 : 0);
      bool ok = true;
      for (int64_t a : axes.value_or(std::vector<int64_t>{})) {
        const auto at = axis_in(a, x.dims.size());
        ok = ok && at.has_value();
        if (ok) reduced[static_cast<size_t>(*at)] = 1;
      }
      if (axes && axes->empty() && !from_input) std::fill(reduced.begin(), reduced.end(), 1);
      if (axes && axes->empty() && from_input) ok = false;  // (an empty input: see the spec)
      if (ok) {
        std::vector<SymDim> dims;
        for (size_t i = 0; i < x.dims.size(); ++i) {
          if (!reduced[i])
            dims.push_back(x.dims[i]);
          else if (keep)
            dims.push_back(known(1));
        }
        SymbolicValue v = with_dims(arg ? DType::Int64 : x.dtype, dims);
        // The product or sum of a shape's elements (a flatten's row length).
        const bool whole = x.dims.size() == 1 && reduced[0];
        if (whole && x.has_elements && (op == "ReduceProd" || op == "ReduceSum")) {
          SymDim r = known(op == "ReduceProd" ? 1 : 0);
          for (const SymDim& e : x.elements) r = op == "ReduceProd" ? multiply(r, e) : add(r, e);
          v.has_elements = true;
          v.elements = {r};
        }
        set(std::move(v));
      }
    }
  }
  for (size_t i = 0; i < n.outputs.size(); ++i)
    if (!n.outputs[i].empty()) values_[n.outputs[i]] = std::move(out[i]);
}

}  // namespace volt
