#include <gtest/gtest.h>

#include <limits>
#include <map>

#include "operators/common/matmul_shapes.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/op_runner.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

Session single(ModelBuilder& b) {
  const std::string bytes = b.bytes();
  return Session::from_bytes(bytes.data(), bytes.size());
}

// numpy's matmul shapes: 1-D operands promoted and their axes dropped from the result, batch
// axes broadcast and rank-equalized with leading ones; K that differs and batch axes that do not
// broadcast are errors that name the node.
TEST(ShapeOps, MatMulShapesPromoteBroadcastAndRefuse) {
  Node node;
  node.op_type = "MatMul";
  node.name = "mm";
  struct Case {
    Shape a, b, sa, sb, out, result;
  };
  const std::vector<Case> cases = {
      {{3, 4}, {4, 5}, {3, 4}, {4, 5}, {3, 5}, {3, 5}},
      {{4}, {4, 5}, {1, 4}, {4, 5}, {1, 5}, {5}},
      {{3, 4}, {4}, {3, 4}, {4, 1}, {3, 1}, {3}},
      {{4}, {4}, {1, 4}, {4, 1}, {1, 1}, {}},
      {{2, 1, 3, 4}, {5, 4, 6}, {2, 1, 3, 4}, {1, 5, 4, 6}, {2, 5, 3, 6}, {2, 5, 3, 6}},
      {{7, 3, 4}, {4}, {7, 3, 4}, {1, 4, 1}, {7, 3, 1}, {7, 3}},
      {{4}, {2, 4, 6}, {1, 1, 4}, {2, 4, 6}, {2, 1, 6}, {2, 6}}};
  for (const Case& c : cases) {
    const MatMulShapes s = matmul_shapes(c.a, c.b, node);
    EXPECT_EQ(s.a, c.sa) << shape_str(c.a) << " x " << shape_str(c.b);
    EXPECT_EQ(s.b, c.sb) << shape_str(c.a) << " x " << shape_str(c.b);
    EXPECT_EQ(s.out, c.out) << shape_str(c.a) << " x " << shape_str(c.b);
    EXPECT_EQ(s.result, c.result) << shape_str(c.a) << " x " << shape_str(c.b);
    EXPECT_EQ(s.m, s.out[s.out.size() - 2]);
    EXPECT_EQ(s.n, s.out.back());
  }
  for (const auto& [a, b] : std::vector<std::pair<Shape, Shape>>{
           {{3, 4}, {5, 6}}, {{4}, {5}}, {{2, 3, 4}, {3, 4, 5}}, {{}, {4, 5}}}) {
    try {
      matmul_shapes(a, b, node);
      ADD_FAILURE() << shape_str(a) << " x " << shape_str(b) << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
      EXPECT_NE(std::string(e.what()).find("mm"), std::string::npos) << e.what();
    }
  }
}

// The broadcast walk merges axes; every element must still be visited once, in row-major order,
// at the offsets a per-axis index computation gives.
TEST(ShapeOps, BroadcastIteratorMatchesPerAxisIndexing) {
  const std::vector<std::pair<Shape, std::vector<Shape>>> cases = {
      {{2, 3, 4}, {{2, 3, 4}, {1, 3, 1}, {4}}},  // contiguous, middle axis, trailing axis
      {{2, 1, 3, 5}, {{1}, {2, 1, 1, 5}, {3, 5}}},
      {{7}, {{7}, {1}}},
      {{}, {{}}},                      // a scalar: one element
      {{3, 0, 2}, {{3, 1, 2}}},        // empty: nothing
      {{1, 1, 6}, {{6}, {1, 1, 1}}}};  // size-1 axes skipped
  for (const auto& [out, ins] : cases) {
    std::vector<std::vector<int64_t>> strides;
    for (const Shape& in : ins) strides.push_back(broadcast_strides(in, out));
    std::vector<std::vector<int64_t>> seen;
    BroadcastIterator(out, strides).for_each([&](const int64_t* off) {
      seen.emplace_back(off, off + ins.size());
    });
    ASSERT_EQ(static_cast<int64_t>(seen.size()), numel_of(out)) << shape_str(out);
    for (int64_t e = 0; e < numel_of(out); ++e) {
      int64_t rem = e;
      std::vector<int64_t> want(ins.size(), 0);
      for (size_t d = out.size(); d-- > 0;) {
        const int64_t i = rem % out[d];
        rem /= out[d];
        for (size_t j = 0; j < ins.size(); ++j) want[j] += i * strides[j][d];
      }
      EXPECT_EQ(seen[static_cast<size_t>(e)], want) << shape_str(out) << " element " << e;
    }
  }
}

TEST(ShapeOps, TransposeMovesElements) {
  ModelBuilder b;
  b.input_any("x", 1).output_any("y", 1).node("Transpose", {"x"}, {"y"}, [](auto& n) {
    ModelBuilder::set_ints(n, "perm", {2, 0, 1});
  });
  Session s = single(b);
  Tensor x = Tensor::empty(DType::Float, {2, 3, 4});
  for (int i = 0; i < 24; ++i) x.data<float>()[i] = static_cast<float>(i);
  Tensor y = s.run({{"x", x}})[0].tensor();
  ASSERT_EQ(y.shape(), (Shape{4, 2, 3}));
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t bb = 0; bb < 3; ++bb)
      for (int64_t c = 0; c < 4; ++c)
        EXPECT_EQ(y.data<float>()[(c * 2 + a) * 3 + bb], x.data<float>()[(a * 3 + bb) * 4 + c]);
}

TEST(ShapeOps, ConcatAndGatherWithNegativeIndices) {
  ModelBuilder b;
  b.input_any("a", 7).input_any("b", 7).input_any("i", 7).output_any("g", 7);
  b.node("Concat", {"a", "b"}, {"c"}, [](auto& n) { ModelBuilder::set_int(n, "axis", 1); });
  b.node("Gather", {"c", "i"}, {"g"}, [](auto& n) { ModelBuilder::set_int(n, "axis", 1); });
  Session s = single(b);
  auto out = s.run({{"a", Tensor::from<int64_t>({1, 2, 3, 4}, {2, 2})},
                    {"b", Tensor::from<int64_t>({5, 6}, {2, 1})},
                    {"i", Tensor::from<int64_t>({-1, 0}, {2})}});
  const Tensor& g = out[0].tensor();
  ASSERT_EQ(g.shape(), (Shape{2, 2}));
  EXPECT_EQ(std::vector<int64_t>(g.data<int64_t>(), g.data<int64_t>() + 4),
            (std::vector<int64_t>{5, 1, 6, 3}));
  EXPECT_VOLT_ERROR(s.run({{"a", Tensor::from<int64_t>({1, 2, 3, 4}, {2, 2})},
                           {"b", Tensor::from<int64_t>({5, 6}, {2, 1})},
                           {"i", Tensor::from<int64_t>({3}, {1})}}),
                    InvalidArgument, "Gather", "index 3");
}

TEST(ShapeOps, SqueezeUnsqueezeAcrossOpsets) {
  for (int opset : {11, 13}) {
    ModelBuilder b(opset);
    b.input_any("x", 1).output_any("y", 1);
    if (opset >= 13) {
      b.initializer_i64("axes", {2}, {0, -1});
      b.node("Unsqueeze", {"x", "axes"}, {"u"})
          .initializer_i64("sq", {1}, {0})
          .node("Squeeze", {"u", "sq"}, {"y"});
    } else {
      b.node("Unsqueeze", {"x"}, {"u"}, [](auto& n) {
        ModelBuilder::set_ints(n, "axes", {0, -1});
      });
      b.node("Squeeze", {"u"}, {"y"}, [](auto& n) { ModelBuilder::set_ints(n, "axes", {0}); });
    }
    Session s = single(b);
    EXPECT_EQ(s.run({{"x", Tensor::empty(DType::Float, {2, 3})}})[0].tensor().shape(),
              (Shape{2, 3, 1}))
        << opset;
  }
}

TEST(ShapeOps, CastBetweenTypes) {
  ModelBuilder b;
  b.input_any("x", 1).output_any("y", 7).output_any("h", 10).node(
      "Cast", {"x"}, {"y"}, [](auto& n) { ModelBuilder::set_int(n, "to", 7); });
  b.node("Cast", {"x"}, {"h"}, [](auto& n) { ModelBuilder::set_int(n, "to", 10); });
  Session s = single(b);
  auto out = s.run({{"x", Tensor::from<float>({1.9f, -2.5f, 65504.0f}, {3})}});
  EXPECT_EQ(out[0].tensor().data<int64_t>()[0], 1);
  EXPECT_EQ(out[0].tensor().data<int64_t>()[1], -2);
  EXPECT_EQ(static_cast<float>(out[1].tensor().data<Float16>()[2]), 65504.0f);
}

TEST(ShapeOps, IntegerDivisionByZeroIsAnErrorNotACrash) {
  ModelBuilder b;
  b.input_any("a", 6).input_any("b", 6).output_any("c", 6).node("Div", {"a", "b"}, {"c"}, {},
                                                                "divide");
  Session s = single(b);
  EXPECT_VOLT_ERROR(
      s.run({{"a", Tensor::from<int32_t>({1, 2}, {2})}, {"b", Tensor::from<int32_t>({1, 0}, {2})}}),
      Runtime, "divide", "division by zero");
}

TEST(ShapeOps, IntegerOverflowWrapsAndTheMostNegativeOverMinusOneDoesNotTrap) {
  // Two's complement wraparound, as numpy and ONNX Runtime give (found by fuzzing: signed
  // overflow was undefined behaviour, and INT64_MIN / -1 traps on x86).
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min(),
                    kMax = std::numeric_limits<int64_t>::max();
  const std::map<std::string, std::vector<int64_t>> want = {{"Mul", {-2, kMin, kMin, -7}},
                                                            {"Add", {kMin + 1, kMax, kMin + 1, 6}},
                                                            {"Sub", {kMax - 2, kMin + 1, kMax, 8}},
                                                            {"Div", {kMax / 2, kMin, kMin, -7}},
                                                            {"Mod", {1, 0, 0, 0}}};
  for (const auto& [op, expected] : want) {
    ModelBuilder b;
    b.input_any("a", 7).input_any("b", 7).output_any("c", 7).node(op, {"a", "b"}, {"c"});
    Session s = single(b);
    const Tensor c = s.run({{"a", Tensor::from<int64_t>({kMax, kMin, kMin, 7}, {4})},
                            {"b", Tensor::from<int64_t>({2, -1, 1, -1}, {4})}})[0]
                         .tensor();
    EXPECT_EQ(std::vector<int64_t>(c.data<int64_t>(), c.data<int64_t>() + 4), expected) << op;
  }
}

}  // namespace
}  // namespace volt
