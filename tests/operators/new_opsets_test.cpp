// Models written at opsets 18 to 21, past what Debian's libonnx 1.12 (and its checker) knows,
// for ops whose signature changed after 17: they load and compute what the spec says.
#include <gtest/gtest.h>

#include "model_builder.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

Session session_of(ModelBuilder& b) {
  const std::string bytes = b.bytes();
  return Session::from_bytes(bytes.data(), bytes.size());
}

std::vector<float> values(const Tensor& t) {
  return {t.data<float>(), t.data<float>() + t.numel()};
}

TEST(NewOpsets, ReduceOpsTakeAxesAsAnInputFrom18) {
  for (const std::string op : {"ReduceMean", "ReduceMax", "ReduceL2", "ReduceLogSumExp"}) {
    ModelBuilder b(18, 10);
    b.input_any("x", 1).output_any("y", 1).initializer_i64("axes", {1}, {1});
    b.node(op, {"x", "axes"}, {"y"}, [](auto& n) { ModelBuilder::set_int(n, "keepdims", 0); });
    Session s = session_of(b);
    const Tensor y = s.run({{"x", Tensor::from<float>({1, 2, 3, 4, 5, 6}, {2, 3})}})[0].tensor();
    ASSERT_EQ(y.shape(), (Shape{2})) << op;
    if (op == "ReduceMean") {
      EXPECT_EQ(values(y), (std::vector<float>{2, 5}));
    }
    if (op == "ReduceMax") {
      EXPECT_EQ(values(y), (std::vector<float>{3, 6}));
    }
  }
  // noop_with_empty_axes at 18: no axes means the identity.
  ModelBuilder b(18, 10);
  b.input_any("x", 1).output_any("y", 1).node("ReduceSum", {"x"}, {"y"}, [](auto& n) {
    ModelBuilder::set_int(n, "noop_with_empty_axes", 1);
  });
  Session s = session_of(b);
  EXPECT_EQ(s.run({{"x", Tensor::from<float>({1, 2}, {2})}})[0].tensor().shape(), (Shape{2}));
}

TEST(NewOpsets, SplitWithNumOutputsFrom18) {
  ModelBuilder b(18, 10);
  b.input_any("x", 1).output_any("a", 1).output_any("b", 1).output_any("c", 1);
  b.node("Split", {"x"}, {"a", "b", "c"},
         [](auto& n) { ModelBuilder::set_int(n, "num_outputs", 3); });
  Session s = session_of(b);
  auto out = s.run({{"x", Tensor::from<float>({1, 2, 3, 4, 5, 6, 7}, {7})}});
  // ceil(7 / 3) = 3, 3, then the rest: 1.
  EXPECT_EQ(values(out[0].tensor()), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(values(out[1].tensor()), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(values(out[2].tensor()), (std::vector<float>{7}));
}

TEST(NewOpsets, PadWithAxesFrom18) {
  ModelBuilder b(18, 10);
  b.input_any("x", 1)
      .output_any("y", 1)
      .initializer_i64("pads", {2}, {1, 2})
      .initializer_i64("axes", {1}, {-1});
  b.node("Pad", {"x", "pads", "", "axes"}, {"y"},
         [](auto& n) { ModelBuilder::set_string(n, "mode", "edge"); });
  Session s = session_of(b);
  const Tensor y = s.run({{"x", Tensor::from<float>({1, 2, 3, 4}, {2, 2})}})[0].tensor();
  ASSERT_EQ(y.shape(), (Shape{2, 5}));
  EXPECT_EQ(values(y), (std::vector<float>{1, 1, 2, 2, 2, 3, 3, 4, 4, 4}));
}

TEST(NewOpsets, ResizeWithAxesAndAspectPolicyFrom18) {
  ModelBuilder b(18, 10);
  b.input_any("x", 1).output_any("y", 1).initializer_i64("sizes", {2}, {4, 6});
  b.node("Resize", {"x", "", "", "sizes"}, {"y"}, [](auto& n) {
    ModelBuilder::set_ints(n, "axes", {2, 3});
    ModelBuilder::set_string(n, "keep_aspect_ratio_policy", "not_larger");
  });
  Session s = session_of(b);
  const Tensor y = s.run({{"x", Tensor::empty(DType::Float, {1, 1, 2, 2})}})[0].tensor();
  EXPECT_EQ(y.shape(), (Shape{1, 1, 4, 4}));  // scale min(4/2, 6/2) = 2 on both axes
}

TEST(NewOpsets, ScatterElementsMaxAndBitwiseFrom18) {
  ModelBuilder b(18, 10);
  b.input_any("d", 1).input_any("i", 7).input_any("u", 1).output_any("y", 1);
  b.node("ScatterElements", {"d", "i", "u"}, {"y"},
         [](auto& n) { ModelBuilder::set_string(n, "reduction", "max"); });
  Session s = session_of(b);
  const Tensor y = s.run({{"d", Tensor::from<float>({1, 5, 3}, {3})},
                          {"i", Tensor::from<int64_t>({1, 1, 2}, {3})},
                          {"u", Tensor::from<float>({4, 7, 2}, {3})}})[0]
                       .tensor();
  EXPECT_EQ(values(y), (std::vector<float>{1, 7, 3}));
  ModelBuilder c(18, 10);
  c.input_any("a", 6).input_any("b", 6).output_any("y", 6).node("BitwiseXor", {"a", "b"}, {"y"});
  Session t = session_of(c);
  EXPECT_EQ(
      t.run({{"a", Tensor::from<int32_t>({12}, {1})}, {"b", Tensor::from<int32_t>({10}, {1})}})[0]
          .tensor()
          .data<int32_t>()[0],
      6);
}

TEST(NewOpsets, GeluFrom20AndMishFrom18) {
  ModelBuilder b(20, 10);
  b.input_any("x", 1).output_any("g", 1).output_any("t", 1).node("Gelu", {"x"}, {"g"});
  b.node("Gelu", {"x"}, {"t"}, [](auto& n) { ModelBuilder::set_string(n, "approximate", "tanh"); });
  Session s = session_of(b);
  auto out = s.run({{"x", Tensor::from<float>({1.0f}, {1})}});
  EXPECT_NEAR(out[0].tensor().data<float>()[0], 0.8413447f, 1e-6f);  // x * Phi(x)
  EXPECT_NEAR(out[1].tensor().data<float>()[0], 0.8411920f, 1e-6f);
  ModelBuilder m(18, 10);
  m.input_any("x", 1).output_any("y", 1).node("Mish", {"x"}, {"y"});
  Session ms = session_of(m);
  EXPECT_NEAR(ms.run({{"x", Tensor::from<float>({1.0f}, {1})}})[0].tensor().data<float>()[0],
              0.8650984f, 1e-6f);
}

TEST(NewOpsets, OpsetsBeyondWhatExistsAreRefused) {
  ModelBuilder b(26, 10);
  b.input_any("x", 1).output_any("y", 1).node("Relu", {"x"}, {"y"});
  const std::string bytes = b.bytes();
  EXPECT_VOLT_ERROR(Session::from_bytes(bytes.data(), bytes.size()), InvalidModel,
                    "opset version 26");
}

}  // namespace
}  // namespace volt
