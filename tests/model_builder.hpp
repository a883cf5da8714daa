// Builds small ONNX models in tests, good and deliberately bad.
#pragma once
#include <algorithm>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"
#include "volt/volt.hpp"

namespace volt::testing {

// n values drawn uniformly from [lo, hi): weights and inputs of the models tests build.
inline std::vector<float> uniform_values(std::mt19937& rng, size_t n, float lo = -1.0f,
                                         float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& e : v) e = u(rng);
  return v;
}

// A float tensor of `shape` holding uniform_values.
inline Tensor uniform_tensor(std::mt19937& rng, const Shape& shape) {
  Tensor x = Tensor::empty(DType::Float, shape);
  const std::vector<float> values = uniform_values(rng, static_cast<size_t>(x.numel()));
  std::copy(values.begin(), values.end(), x.data<float>());
  return x;
}

class ModelBuilder {
 public:
  explicit ModelBuilder(int opset = 13, int ir = 8) {
    m_.set_ir_version(ir);
    auto* op = m_.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
    m_.mutable_graph()->set_name("test");
  }
  ModelBuilder& input(const std::string& name, int elem, const std::vector<int64_t>& dims) {
    set_type(m_.mutable_graph()->add_input(), name, elem, dims);
    return *this;
  }
  // A tensor value with element type only (rank unknown).
  ModelBuilder& input_any(const std::string& name, int elem) {
    auto* v = m_.mutable_graph()->add_input();
    v->set_name(name);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(elem);
    return *this;
  }
  ModelBuilder& output_any(const std::string& name, int elem) {
    auto* v = m_.mutable_graph()->add_output();
    v->set_name(name);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(elem);
    return *this;
  }
  ModelBuilder& output(const std::string& name, int elem, const std::vector<int64_t>& dims) {
    set_type(m_.mutable_graph()->add_output(), name, elem, dims);
    return *this;
  }
  // `attrs` may add attributes to the node.
  ModelBuilder& node(const std::string& op, const std::vector<std::string>& ins,
                     const std::vector<std::string>& outs,
                     const std::function<void(onnx::NodeProto&)>& attrs = {},
                     const std::string& name = "") {
    auto* n = m_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? op + std::to_string(m_.graph().node_size()) : name);
    for (const auto& i : ins) n->add_input(i);
    for (const auto& o : outs) n->add_output(o);
    if (attrs) attrs(*n);
    return *this;
  }
  // The op after `input` that the passes fuse into the convolution before it as its activation:
  // "Clip" (between -0.5 and 1), "LeakyRelu" (alpha 0.1) or any op of one input ("Relu"); none
  // for "". The name of its output (`input` where none).
  std::string activation(const std::string& kind, const std::string& input) {
    if (kind.empty()) return input;
    const std::string out = input + "_" + kind;
    if (kind == "Clip") {
      initializer(out + "_lo", {}, {-0.5f}).initializer(out + "_hi", {}, {1.0f});
      node("Clip", {input, out + "_lo", out + "_hi"}, {out});
    } else if (kind == "LeakyRelu") {
      node("LeakyRelu", {input}, {out}, [](auto& n) { set_float(n, "alpha", 0.1f); });
    } else {
      node(kind, {input}, {out});
    }
    return out;
  }
  ModelBuilder& initializer(const std::string& name, const std::vector<int64_t>& dims,
                            const std::vector<float>& values) {
    auto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    for (float v : values) t->add_float_data(v);
    return *this;
  }
  ModelBuilder& initializer_i64(const std::string& name, const std::vector<int64_t>& dims,
                                const std::vector<int64_t>& values) {
    auto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    for (int64_t d : dims) t->add_dims(d);
    for (int64_t v : values) t->add_int64_data(v);
    return *this;
  }
  // An 8-, 16- or 32-bit integer initializer (ONNX keeps those in int32_data).
  ModelBuilder& initializer_int(const std::string& name, int elem, const std::vector<int64_t>& dims,
                                const std::vector<int32_t>& values) {
    auto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(elem);
    for (int64_t d : dims) t->add_dims(d);
    for (int32_t v : values) t->add_int32_data(v);
    return *this;
  }
  // Makes `n` a Constant holding a float tensor.
  static void set_float_tensor(onnx::NodeProto& n, const std::string& key,
                               const std::vector<int64_t>& dims, const std::vector<float>& values) {
    auto* a = n.add_attribute();
    a->set_name(key);
    a->set_type(onnx::AttributeProto::TENSOR);
    auto* t = a->mutable_t();
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    for (float v : values) t->add_float_data(v);
  }
  // A subgraph attribute (If's branches, Loop's body): the graph another builder made.
  static void set_graph(onnx::NodeProto& n, const std::string& key, const ModelBuilder& body) {
    auto* a = n.add_attribute();
    a->set_name(key);
    a->set_type(onnx::AttributeProto::GRAPH);
    *a->mutable_g() = body.m_.graph();
  }
  onnx::ModelProto& proto() { return m_; }
  // Imports `domain` at `version` too (custom and volt's own ops).
  ModelBuilder& import_domain(const std::string& domain, int version) {
    auto* op = m_.add_opset_import();
    op->set_domain(domain);
    op->set_version(version);
    return *this;
  }
  std::string bytes() const { return m_.SerializeAsString(); }
  void save(const std::string& path) const {
    std::ofstream out(path, std::ios::binary);
    out << bytes();
  }

  static void set_int(onnx::NodeProto& n, const std::string& key, int64_t v) {
    auto* a = n.add_attribute();
    a->set_name(key);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void set_ints(onnx::NodeProto& n, const std::string& key, const std::vector<int64_t>& v) {
    auto* a = n.add_attribute();
    a->set_name(key);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void set_float(onnx::NodeProto& n, const std::string& key, float v) {
    auto* a = n.add_attribute();
    a->set_name(key);
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  static void set_string(onnx::NodeProto& n, const std::string& key, const std::string& v) {
    auto* a = n.add_attribute();
    a->set_name(key);
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(v);
  }
  static void set_strings(onnx::NodeProto& n, const std::string& key,
                          const std::vector<std::string>& v) {
    auto* a = n.add_attribute();
    a->set_name(key);
    a->set_type(onnx::AttributeProto::STRINGS);
    for (const auto& s : v) a->add_strings(s);
  }

 private:
  static void set_type(onnx::ValueInfoProto* v, const std::string& name, int elem,
                       const std::vector<int64_t>& dims) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(elem);
    auto* s = t->mutable_shape();
    for (int64_t d : dims) {
      auto* dim = s->add_dim();
      if (d >= 0)
        dim->set_dim_value(d);
      else
        dim->set_dim_param("N");
    }
  }
  onnx::ModelProto m_;
};

// Asserts that `f` throws volt::Error whose message contains every fragment.
#define EXPECT_VOLT_ERROR(statement, code_, ...)                                   \
  do {                                                                             \
    try {                                                                          \
      statement;                                                                   \
      ADD_FAILURE() << "expected a volt::Error from: " #statement;                 \
    } catch (const ::volt::Error& e) {                                             \
      EXPECT_EQ(e.code(), ::volt::ErrorCode::code_) << e.what();                   \
      for (const char* fragment : std::initializer_list<const char*>{__VA_ARGS__}) \
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos)         \
            << "message '" << e.what() << "' lacks '" << fragment << "'";          \
    }                                                                              \
  } while (0)

}  // namespace volt::testing
