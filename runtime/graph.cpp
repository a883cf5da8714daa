#include "runtime/graph.hpp"

#include "runtime/error.hpp"

namespace volt {

std::string canonical_domain(const std::string& domain) {
  return domain.empty() || domain == "ai.onnx" ? kOnnxDomain : domain;
}

const char* attribute_type_name(Attribute::Type t) {
  switch (t) {
    case Attribute::Type::Float:
      return "float";
    case Attribute::Type::Int:
      return "int";
    case Attribute::Type::String:
      return "string";
    case Attribute::Type::Tensor:
      return "tensor";
    case Attribute::Type::Graph:
      return "graph";
    case Attribute::Type::Floats:
      return "floats";
    case Attribute::Type::Ints:
      return "ints";
    case Attribute::Type::Strings:
      return "strings";
    case Attribute::Type::Tensors:
      return "tensors";
    case Attribute::Type::Graphs:
      return "graphs";
    case Attribute::Type::TypeProto:
      return "type";
  }
  return "?";
}

std::string Node::describe() const {
  std::string d = domain == kOnnxDomain ? "" : domain + ".";
  return "node '" + name + "' (" + d + op_type + ")";
}

std::string Node::fused_op() const {
  std::string s = op_type;
  if (domain != kOnnxDomain) return s;
  const bool conv = op_type == "Conv", matmul = op_type == "MatMul";
  auto activation = [&] {
    auto a = attributes.find("volt.activation");
    if (a != attributes.end() && a->second.type == Attribute::Type::String) s += "+" + a->second.s;
  };
  if (matmul && has_input(2)) s += "+Bias";
  if (conv && has_input(3)) s += "+Add";  // Conv: the residual, then the activation
  activation();
  if (matmul && has_input(3)) s += "+Add";  // MatMul: the activation, then the residual
  return s;
}

const Attribute* Node::find_attr(const std::string& key, Attribute::Type type) const {
  auto it = attributes.find(key);
  if (it == attributes.end()) return nullptr;
  VOLT_CHECK(it->second.type == type, InvalidModel,
             describe() + ": attribute '" + key + "' is " + attribute_type_name(it->second.type) +
                 ", expected " + attribute_type_name(type));
  return &it->second;
}

int64_t Node::attr_int(const std::string& key, int64_t fallback) const {
  const Attribute* a = find_attr(key, Attribute::Type::Int);
  return a ? a->i : fallback;
}

int64_t Node::attr_int(const std::string& key) const {
  const Attribute* a = find_attr(key, Attribute::Type::Int);
  VOLT_CHECK(a, InvalidModel, describe() + ": required attribute '" + key + "' is missing");
  return a->i;
}

float Node::attr_float(const std::string& key, float fallback) const {
  const Attribute* a = find_attr(key, Attribute::Type::Float);
  return a ? a->f : fallback;
}

std::string Node::attr_string(const std::string& key, const std::string& fallback) const {
  const Attribute* a = find_attr(key, Attribute::Type::String);
  return a ? a->s : fallback;
}

std::vector<int64_t> Node::attr_ints(const std::string& key, std::vector<int64_t> fallback) const {
  const Attribute* a = find_attr(key, Attribute::Type::Ints);
  return a ? a->ints : fallback;
}

std::vector<float> Node::attr_floats(const std::string& key, std::vector<float> fallback) const {
  const Attribute* a = find_attr(key, Attribute::Type::Floats);
  return a ? a->floats : fallback;
}

std::vector<std::string> Node::attr_strings(const std::string& key) const {
  const Attribute* a = find_attr(key, Attribute::Type::Strings);
  return a ? a->strings : std::vector<std::string>{};
}

const Tensor& Node::attr_tensor(const std::string& key) const {
  const Attribute* a = find_attr(key, Attribute::Type::Tensor);
  VOLT_CHECK(a, InvalidModel, describe() + ": required attribute '" + key + "' is missing");
  return a->t;
}

Tensor constant_node_value(const Node& n) {
  if (n.has_attr("value")) return n.attr_tensor("value");
  if (n.has_attr("value_float")) return Tensor::scalar(n.attr_float("value_float", 0));
  if (n.has_attr("value_int")) return Tensor::scalar(n.attr_int("value_int"));
  if (n.has_attr("value_floats")) {
    auto v = n.attr_floats("value_floats");
    return Tensor::from(v, {static_cast<int64_t>(v.size())});
  }
  if (n.has_attr("value_ints")) {
    auto v = n.attr_ints("value_ints");
    return Tensor::from(v, {static_cast<int64_t>(v.size())});
  }
  if (n.has_attr("value_string")) return Tensor::scalar(n.attr_string("value_string", ""));
  if (n.has_attr("value_strings")) {
    auto v = n.attr_strings("value_strings");
    return Tensor::from(v, {static_cast<int64_t>(v.size())});
  }
  fail(ErrorCode::InvalidModel, n.describe() + ": Constant has no value attribute");
}

std::shared_ptr<Graph> Node::attr_graph(const std::string& key) const {
  const Attribute* a = find_attr(key, Attribute::Type::Graph);
  VOLT_CHECK(a && a->g, InvalidModel,
             describe() + ": required graph attribute '" + key + "' is missing");
  return a->g;
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

Attribute graph_attr(std::shared_ptr<Graph> g) {
  Attribute a;
  a.type = Attribute::Type::Graph;
  a.g = std::move(g);
  return a;
}

}  // namespace volt
