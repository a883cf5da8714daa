// The intermediate representation: a Model owns a Graph of Nodes over named values.
// Built by loaders/, rewritten by passes/, compiled by the planner. Nothing here knows protobuf.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "volt/volt.hpp"

namespace volt {

struct Graph;

// The canonical name of the default ONNX domain ("" and "ai.onnx" are the same domain).
inline const std::string kOnnxDomain = "ai.onnx";
std::string canonical_domain(const std::string& domain);

struct Attribute {
  enum class Type {
    Float,
    Int,
    String,
    Tensor,
    Graph,
    Floats,
    Ints,
    Strings,
    Tensors,
    Graphs,
    TypeProto
  };
  Type type = Type::Int;
  float f = 0;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::shared_ptr<Graph> g;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<Graph>> graphs;
  ValueInfo type_proto;  // for Type::TypeProto
};
const char* attribute_type_name(Attribute::Type t);

struct Node {
  std::string name;
  std::string op_type;
  std::string domain = kOnnxDomain;  // canonical
  int opset = 0;                     // the version of `domain` the model imports
  std::vector<std::string> inputs;   // "" marks an omitted optional input
  std::vector<std::string> outputs;  // "" marks an omitted optional output
  std::map<std::string, Attribute> attributes;
  // Per input, the index of its type variable in the op's ONNX schema (T of Conv's X, W and B):
  // inputs with the same index must have the same dtype, which the planner checks before any
  // kernel sees them. -1: no constraint shared with other inputs. Empty for ops with no schema.
  std::vector<int8_t> input_type_group;
  // The kernels' device: "" for the host, "cuda" for nodes the place_on_device pass put on the
  // session's accelerator.
  std::string device;

  // "node 'conv1' (Conv)": the prefix of every message about this node.
  std::string describe() const;
  // The op and what the passes fused into it, in the order it runs: "Conv+Add+Relu",
  // "MatMul+Bias+Gelu+Add". Profiles name nodes by it.
  std::string fused_op() const;

  bool has_input(size_t i) const { return i < inputs.size() && !inputs[i].empty(); }
  bool has_output(size_t i) const { return i < outputs.size() && !outputs[i].empty(); }
  bool has_attr(const std::string& key) const { return attributes.count(key) != 0; }

  // Typed attribute access: a missing required attribute, or one of the wrong type, is an
  // InvalidModel error naming the node.
  const Attribute* find_attr(const std::string& key, Attribute::Type type) const;
  int64_t attr_int(const std::string& key, int64_t fallback) const;
  int64_t attr_int(const std::string& key) const;
  float attr_float(const std::string& key, float fallback) const;
  std::string attr_string(const std::string& key, const std::string& fallback) const;
  std::vector<int64_t> attr_ints(const std::string& key, std::vector<int64_t> fallback = {}) const;
  std::vector<float> attr_floats(const std::string& key, std::vector<float> fallback = {}) const;
  std::vector<std::string> attr_strings(const std::string& key) const;
  const Tensor& attr_tensor(const std::string& key) const;
  std::shared_ptr<Graph> attr_graph(const std::string& key) const;
};

// The tensor a Constant node outputs, from whichever value attribute it has (value, value_float,
// value_floats, value_int, value_ints, value_string, value_strings); ErrorCode::InvalidModel
// when it has none. The Constant kernel and the pass that makes Constants initializers share it.
Tensor constant_node_value(const Node& n);

struct Graph {
  std::string name;
  std::vector<Node> nodes;
  std::vector<ValueInfo> inputs;  // includes inputs that have an initializer (overridable)
  std::vector<ValueInfo> outputs;
  std::vector<ValueInfo> value_info;
  std::map<std::string, Tensor> initializers;
  // The model's 2-D float sparse_initializers in CSR form, beside their dense copies in
  // `initializers` (same name). The keep_sparse_weights pass points MatMul at them; values of
  // this map that no node reads are ignored.
  std::map<std::string, CsrTensor> sparse_initializers;

  bool is_initializer(const std::string& name) const {
    return initializers.count(name) != 0 || sparse_initializers.count(name) != 0;
  }
};

// Attribute constructors (for passes and gradient rules that write nodes).
Attribute int_attr(int64_t v);
Attribute ints_attr(std::vector<int64_t> v);
Attribute float_attr(float v);
Attribute string_attr(std::string v);
Attribute graph_attr(std::shared_ptr<Graph> g);

struct Model {
  int64_t ir_version = 0;
  std::map<std::string, int64_t> opsets;  // canonical domain -> version
  std::string producer_name;
  std::string producer_version;
  std::string domain;
  int64_t model_version = 0;
  std::string doc_string, graph_doc_string;
  std::map<std::string, std::string> metadata_props;
  std::string source;  // the file it came from, or "<memory>"; used in messages
  Graph graph;
};

}  // namespace volt
