// fp16 models on the CPU (compute_fp16_in_fp32): they compute in fp32 on oneDNN's primitives,
// with the model's boundary casts kept exact and its declared types at the edges.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "model_builder.hpp"
#include "runtime/graph.hpp"
#include "runtime/passes/passes.hpp"
#include "test_options.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;
using testing::test_options;

// Values in [-1, 1] that fp16 holds exactly, so that the fp32 twin of a model has the same
// weights as its fp16 form.
std::vector<float> half_values(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(Float16(u(rng)));
  return v;
}

int64_t numel(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// A weight of the model, as fp16 or as fp32.
void add_weight(ModelBuilder& b, const std::string& name, const std::vector<int64_t>& dims,
                const std::vector<float>& v, bool half) {
  if (!half) {
    b.initializer(name, dims, v);
    return;
  }
  auto* t = b.proto().mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT16);
  for (int64_t d : dims) t->add_dims(d);
  for (float x : v) t->add_int32_data(Float16(x).bits);
}

// x -> Conv(3x3, pad 1) -> Relu -> ConvTranspose(stride 2, output_padding 1) -> Sigmoid -> y,
// in fp16 or fp32 throughout.
std::string conv_model(bool half, uint32_t seed) {
  std::mt19937 rng(seed);
  const int elem = half ? onnx::TensorProto::FLOAT16 : onnx::TensorProto::FLOAT;
  ModelBuilder b(13);
  b.input("x", elem, {2, 3, 9, 9});
  add_weight(b, "w1", {8, 3, 3, 3}, half_values(8 * 27, rng), half);
  add_weight(b, "b1", {8}, half_values(8, rng), half);
  add_weight(b, "w2", {8, 4, 3, 3}, half_values(8 * 36, rng), half);
  add_weight(b, "b2", {4}, half_values(4, rng), half);
  b.node("Conv", {"x", "w1", "b1"}, {"c"}, [](onnx::NodeProto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  b.node("Relu", {"c"}, {"r"});
  b.node("ConvTranspose", {"r", "w2", "b2"}, {"t"}, [](onnx::NodeProto& n) {
    ModelBuilder::set_ints(n, "strides", {2, 2});
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
    ModelBuilder::set_ints(n, "output_padding", {1, 1});
  });
  b.node("Sigmoid", {"t"}, {"y"});
  b.output("y", elem, {2, 4, 18, 18});
  return b.bytes();
}

Tensor half_input(const Shape& shape, std::mt19937& rng, std::vector<float>& as_float) {
  as_float = half_values(static_cast<size_t>(numel(shape)), rng);
  Tensor h = Tensor::empty(DType::Float16, shape);
  for (size_t i = 0; i < as_float.size(); ++i) h.data<Float16>()[i] = Float16(as_float[i]);
  return h;
}

TEST(Fp16Models, ComputeInFp32LikeTheirFp32Twin) {
  std::mt19937 rng(5);
  std::vector<float> xf;
  const Tensor x = half_input({2, 3, 9, 9}, rng, xf);
  const std::string half = conv_model(true, 9), full = conv_model(false, 9);
  Session s16 = Session::from_bytes(half.data(), half.size(), test_options());
  Session s32 = Session::from_bytes(full.data(), full.size(), test_options());
  RunProfile profile;
  const auto y16 = s16.run({{"x", x}}, {}, {.profile = &profile});
  const auto y32 = s32.run({{"x", Tensor::from<float>(xf, {2, 3, 9, 9})}});
  const Tensor& a = y16[0].tensor();
  const Tensor& b = y32[0].tensor();
  ASSERT_EQ(a.dtype(), DType::Float16);  // the declared type at the edge
  ASSERT_EQ(a.shape(), b.shape());
  // The same fp32 computation on the same (exactly converted) weights and input, rounded to
  // fp16 once at the end: the same bits as the twin's fp32 result rounded to fp16.
  for (int64_t i = 0; i < a.numel(); ++i)
    ASSERT_EQ(a.data<Float16>()[i].bits, Float16(b.data<float>()[i]).bits) << "element " << i;
  // And no node of it ran a reference loop (the fp16 kernels are references).
  for (const ProfileEvent& e : profile.events)
    EXPECT_TRUE(e.reference.empty()) << e.node << " (" << e.op << "): " << e.reference;
}

// fp32 input -> Cast(fp16) -> MatMul(fp16 weight) -> Cast(fp32) -> output, as fp16 converters
// write a model whose interface stays fp32.
TEST(Fp16Models, BoundaryCastsStayExact) {
  std::mt19937 rng(6);
  const auto w = half_values(16 * 8, rng);
  ModelBuilder b(13);
  b.input("x", onnx::TensorProto::FLOAT, {4, 16});
  add_weight(b, "w", {16, 8}, w, true);
  b.node("Cast", {"x"}, {"xh"}, [](onnx::NodeProto& n) { ModelBuilder::set_int(n, "to", 10); });
  b.node("MatMul", {"xh", "w"}, {"yh"});
  b.node("Cast", {"yh"}, {"y"}, [](onnx::NodeProto& n) { ModelBuilder::set_int(n, "to", 1); });
  b.output("y", onnx::TensorProto::FLOAT, {4, 8});
  const std::string bytes = b.bytes();
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(4 * 16);
  for (float& v : x) v = u(rng);  // not fp16 values: the first Cast must round them
  Session s = Session::from_bytes(bytes.data(), bytes.size(), test_options());
  const Tensor y = s.run({{"x", Tensor::from<float>(x, {4, 16})}})[0].tensor();
  ASSERT_EQ(y.dtype(), DType::Float);
  // The product in double of x rounded to fp16 and the weights; the model's own second Cast
  // widens, so nothing after the product rounds: fp32 accumulation of 16 terms of order 1 is
  // within 1e-5 of it, while skipping the first Cast's rounding would be off by ~1e-3.
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 8; ++j) {
      double ref = 0;
      for (int64_t k = 0; k < 16; ++k)
        ref += static_cast<double>(static_cast<float>(Float16(x[i * 16 + k]))) * w[k * 8 + j];
      const float got = y.data<float>()[i * 8 + j];
      EXPECT_NEAR(got, ref, 1e-5) << i << "," << j;
    }
}

// The pass itself: weights converted once, the Cast pair gone, inputs and outputs cast at the
// edges, subgraph bodies converted with their declared types.
TEST(Fp16Models, PassRewritesTypesEverywhere) {
  Graph g;
  g.inputs.push_back({.name = "x", .dtype = DType::Float16});
  g.outputs.push_back({.name = "y", .dtype = DType::Float16});
  g.initializers["w"] = Tensor::empty(DType::Float16, {2});
  g.initializers["w"].data<Float16>()[0] = Float16(0.5f);
  g.initializers["w"].data<Float16>()[1] = Float16(-2.0f);
  g.nodes.push_back(make_node("mul", "Mul", {"x", "w"}, {"m"}, 13));
  Node up = make_node("up", "Cast", {"m"}, {"m32"}, 13);
  up.attributes["to"].type = Attribute::Type::Int;
  up.attributes["to"].i = static_cast<int64_t>(DType::Float);
  g.nodes.push_back(up);
  g.value_info.push_back({.name = "m", .dtype = DType::Float16});
  Node down = make_node("down", "Cast", {"m32"}, {"y"}, 13);
  down.attributes["to"].type = Attribute::Type::Int;
  down.attributes["to"].i = static_cast<int64_t>(DType::Float16);
  g.nodes.push_back(down);
  const Graph out = compute_fp16_in_fp32(g);
  EXPECT_EQ(out.initializers.at("w").dtype(), DType::Float);
  EXPECT_FLOAT_EQ(out.initializers.at("w").data<float>()[1], -2.0f);
  int identities = 0, casts_to_half = 0;
  for (const Node& n : out.nodes) {
    identities += n.op_type == "Identity";
    casts_to_half += n.op_type == "Cast" && n.attr_int("to", 0) == 10;
  }
  EXPECT_EQ(identities, 1);  // Cast(fp16 -> fp32) of a declared fp16 value
  // The model's own narrowing Cast (its input m32 has no declared type), and the output's.
  EXPECT_EQ(casts_to_half, 2);
  // x enters through a cast to fp32, which Mul reads.
  const auto entry = std::find_if(out.nodes.begin(), out.nodes.end(), [](const Node& n) {
    return n.op_type == "Cast" && n.inputs[0] == "x";
  });
  ASSERT_NE(entry, out.nodes.end());
  EXPECT_EQ(entry->attr_int("to", 0), 1);
  EXPECT_EQ(out.nodes[0].inputs[0], entry->outputs[0]);
  EXPECT_EQ(out.nodes.back().outputs[0], "y");
  EXPECT_EQ(out.nodes.back().attr_int("to", 0), 10);
  // A graph without fp16 is returned as it is.
  Graph plain;
  plain.nodes.push_back(make_node("r", "Relu", {"a"}, {"b"}, 13));
  EXPECT_EQ(compute_fp16_in_fp32(plain).nodes.size(), 1u);
}

}  // namespace
}  // namespace volt
