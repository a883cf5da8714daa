// Hand-made hostile models, one test each: every one is answered by a volt::Error with a clear
// message, never a crash, a hang or an OOM kill. (Cases the loader refuses on its own —
// truncated files, short/long initializers, external data past EOF or leaving the folder,
// recursive functions, opsets that do not exist, duplicate names, a node writing a graph input
// — are in tests/loaders/loader_test.cpp; Loops of 2^62 trips and terabyte run-time shapes in
// limits_test.cpp.)
#include <gtest/gtest.h>

#include "model_builder.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

Session session_of(const ModelBuilder& b) {
  const std::string bytes = b.bytes();
  return Session::from_bytes(bytes.data(), bytes.size());
}

onnx::TensorProto* raw_initializer(ModelBuilder& b, const std::string& name, int dtype,
                                   const std::vector<int64_t>& dims) {
  auto* t = b.proto().mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(dtype);
  for (int64_t d : dims) t->add_dims(d);
  return t;
}

TEST(HostileModels, DimensionsNear2To62) {
  // A constant shape that asks for 2^62 floats: refused while planning, nothing allocated.
  ModelBuilder b;
  b.initializer_i64("shape", {2}, {int64_t{1} << 61, 2})
      .output_any("y", 1)
      .node("ConstantOfShape", {"shape"}, {"y"}, {}, "huge");
  EXPECT_VOLT_ERROR(session_of(b).run({}), OutOfMemory, "too large");
  // Declared input dims near 2^62 with a fed tensor that does not match them.
  ModelBuilder c;
  c.input("x", 1, {int64_t{1} << 62, int64_t{1} << 62})
      .output_any("y", 1)
      .node("Relu", {"x"}, {"y"});
  EXPECT_VOLT_ERROR(session_of(c).run({{"x", Tensor::empty(DType::Float, {2, 2})}}),
                    InvalidArgument, "must have shape");
}

TEST(HostileModels, NegativeDimensions) {
  ModelBuilder b;
  b.input("x", 1, {3}).output("y", 1, {3}).node("Add", {"x", "W"}, {"y"});
  raw_initializer(b, "W", onnx::TensorProto::FLOAT, {-1, 3})->set_raw_data(std::string(12, '\0'));
  EXPECT_VOLT_ERROR(session_of(b), InvalidModel, "'W'", "negative dimension");
  // A Reshape to a negative size other than -1.
  ModelBuilder c;
  c.input("x", 1, {6}).output_any("y", 1).node("Reshape", {"x", "s"}, {"y"}, {}, "reshape");
  c.initializer_i64("s", {2}, {-2, 3});
  EXPECT_VOLT_ERROR(session_of(c).run({{"x", Tensor::empty(DType::Float, {6})}}), InvalidArgument,
                    "reshape");
}

TEST(HostileModels, MismatchedDimensions) {
  ModelBuilder b;
  b.output_any("y", 1).node("Add", {"A", "B"}, {"y"}, {}, "add");
  b.initializer("A", {2, 3}, std::vector<float>(6, 1.0f));
  b.initializer("B", {4, 5}, std::vector<float>(20, 1.0f));
  try {
    session_of(b).run({});
    ADD_FAILURE() << "mismatched dims ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("add"), std::string::npos) << e.what();
  }
  ModelBuilder c;
  c.input("x", 1, {2, 3}).output_any("y", 1).node("MatMul", {"x", "W"}, {"y"}, {}, "mm");
  c.initializer("W", {4, 2}, std::vector<float>(8, 1.0f));
  try {
    session_of(c).run({{"x", Tensor::empty(DType::Float, {2, 3})}});
    ADD_FAILURE() << "mismatched MatMul ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mm"), std::string::npos) << e.what();
  }
}

TEST(HostileModels, Rank64) {
  // Rank 64 is legal ONNX: it must run correctly (broadcasting over 64 axes) or be refused
  // clearly. volt runs it.
  std::vector<int64_t> dims(64, 1);
  dims[63] = 3;
  dims[0] = 2;
  ModelBuilder b;
  b.input("x", 1, dims)
      .output_any("y", 1)
      .node("Add", {"x", "one"}, {"h"})
      .node("Relu", {"h"}, {"y"});
  b.initializer("one", {3}, {1.0f, -10.0f, 2.0f});
  Tensor x = Tensor::empty(DType::Float, Shape(dims.begin(), dims.end()));
  for (int64_t i = 0; i < 6; ++i) x.data<float>()[i] = static_cast<float>(i);
  const Tensor y = session_of(b).run({{"x", x}})[0].tensor();
  ASSERT_EQ(y.rank(), 64u);
  const float expect[6] = {1, 0, 4, 4, 0, 7};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y.data<float>()[i], expect[i]) << i;
  // Rank 65 and more fed to a rank-less input: the same.
  std::vector<int64_t> big(80, 1);
  ModelBuilder c;
  c.input_any("x", 1).output_any("y", 1).node("Relu", {"x"}, {"y"});
  EXPECT_EQ(session_of(c)
                .run({{"x", Tensor::empty(DType::Float, Shape(big.begin(), big.end()))}})[0]
                .tensor()
                .rank(),
            80u);
}

TEST(HostileModels, StringsThatAreNotUtf8) {
  ModelBuilder b;
  b.output_any("y", 8).node("Identity", {"S"}, {"y"});
  auto* t = raw_initializer(b, "S", onnx::TensorProto::STRING, {2});
  t->add_string_data("fine");
  t->add_string_data(std::string("\xff\xfe not text", 11));
  EXPECT_VOLT_ERROR(session_of(b), InvalidModel, "'S'", "string element 1 is not valid UTF-8");
  // Overlong encodings and surrogates are invalid too; fed inputs are checked like model data.
  ModelBuilder c;
  c.input("x", 8, {3}).output_any("y", 8).node("StringNormalizer", {"x"}, {"y"}, [](auto& n) {
    ModelBuilder::set_string(n, "case_change_action", "LOWER");
  });
  Session s = session_of(c);
  Tensor good = Tensor::empty(DType::String, {3});
  good.data<std::string>()[0] = "ÄBC";
  good.data<std::string>()[1] = "日本";
  good.data<std::string>()[2] = "😀";
  EXPECT_EQ(s.run({{"x", good}})[0].tensor().data<std::string>()[1], "日本");
  for (const std::string& bad : {std::string("\xc0\xaf"), std::string("\xed\xa0\x80"),
                                 std::string("\xf4\x90\x80\x80"), std::string("ab\xe6\x97")}) {
    Tensor x = good.clone();
    x.data<std::string>()[2] = bad;
    EXPECT_VOLT_ERROR(s.run({{"x", x}}), InvalidArgument, "string element 2 is not valid UTF-8");
  }
}

}  // namespace
}  // namespace volt

namespace volt {
namespace {

// volt's own fused kernels are reachable from a model that imports the ai.volt domain: they
// check what a pass would have guaranteed. A DepthwiseBlock whose padding asks for 2^40 rows, one
// whose X is channels-first-shaped nonsense, and one with non-constant weights.
TEST(HostileModels, VoltKernelsCheckTheirInputs) {
  auto block = [](const std::vector<int64_t>& pads, const std::vector<int64_t>& x_dims,
                  bool constant_weights) {
    ModelBuilder b;
    auto* op = b.proto().add_opset_import();
    op->set_domain("ai.volt");
    op->set_version(1);
    b.input("x", 1, x_dims).output_any("y", 1);
    if (constant_weights)
      b.initializer("W2", {16, 1, 3, 3}, std::vector<float>(144, 0.5f));
    else
      b.input("W2", 1, {16, 1, 3, 3});
    b.node("DepthwiseBlock", {"x", "", "", "W2"}, {"y"}, [&](onnx::NodeProto& n) {
      n.set_domain("ai.volt");
      ModelBuilder::set_ints(n, "pads", pads);
    });
    return b;
  };
  const Tensor x = Tensor::empty(DType::Float, {1, 8, 8, 16});
  EXPECT_VOLT_ERROR(
      session_of(block({int64_t{1} << 40, 1, 1, 1}, {1, 8, 8, 16}, true)).run({{"x", x}}),
      OutOfMemory, "memory limit");
  EXPECT_VOLT_ERROR(session_of(block({1, 1, 1, 1}, {1, 16, 8, 8}, true))
                        .run({{"x", Tensor::empty(DType::Float, {1, 16, 8, 8})}}),
                    InvalidModel, "W2 must be");
  EXPECT_VOLT_ERROR(session_of(block({1, 1, 1, 1}, {1, 8, 8, 16}, false))
                        .run({{"x", x}, {"W2", Tensor::empty(DType::Float, {16, 1, 3, 3})}}),
                    InvalidModel, "constants");
}

}  // namespace
}  // namespace volt
