// fold_shape_arithmetic: shape chains computed from the graph inputs' open dimensions become one
// volt.ShapeFormula per value read (or an initializer), with the answers of the unoptimized graph
// at every input shape.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "loaders/loader.hpp"
#include "model_builder.hpp"
#include "operators/common/shape_formula.hpp"
#include "runtime/passes/passes.hpp"
#include "runtime/passes/symbolic_shapes.hpp"
#include "test_options.hpp"
#include "unoptimized_reference.hpp"

namespace volt {
namespace {

using testing::expect_same_as_unoptimized;
using testing::ModelBuilder;
using testing::test_options;

constexpr int kFloat = 1, kInt64 = 7;

Graph optimized(const std::string& bytes) {
  return run_passes(load_model_from_bytes(bytes.data(), bytes.size()).graph, test_options());
}

size_t count_op(const Graph& g, const std::string& op) {
  return static_cast<size_t>(std::count_if(g.nodes.begin(), g.nodes.end(),
                                           [&](const Node& n) { return n.op_type == op; }));
}

Tensor random_tensor(const Shape& shape, std::mt19937& rng) {
  Tensor t = Tensor::empty(DType::Float, shape);
  const auto v = testing::uniform_values(rng, static_cast<size_t>(t.numel()));
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

// x: [B, T, 32], B and T open. PyTorch's way of splitting heads, and shapes computed from T.
std::string head_split_model() {
  ModelBuilder b;
  b.input("x", kFloat, {-1, -1, 32});
  b.initializer_i64("zero", {}, {0}).initializer_i64("one", {}, {1});
  b.initializer_i64("two", {}, {2}).initializer_i64("four", {}, {4});
  b.initializer_i64("axis0", {1}, {0}).initializer_i64("four_1d", {1}, {4});
  b.initializer_i64("minus_one", {1}, {-1}).initializer_i64("axis1", {1}, {1});
  b.node("Shape", {"x"}, {"s"});
  b.node("Gather", {"s", "zero"}, {"batch"});
  b.node("Gather", {"s", "one"}, {"time"});
  b.node("Gather", {"s", "two"}, {"hidden"});
  b.node("Div", {"hidden", "four"}, {"depth"});  // 8: a constant
  b.node("Mul", {"batch", "time"}, {"rows"});
  b.node("Sub", {"time", "one"}, {"time_less_one"});
  for (const char* v : {"batch", "time", "depth", "rows", "hidden", "time_less_one"})
    b.node("Unsqueeze", {v, "axis0"}, {std::string(v) + "_1d"});
  // [B, T, 4, 8] -> [B, 4, T, 8] -> [B * T, 32] (of the transposed data)
  b.node("Concat", {"batch_1d", "time_1d", "four_1d", "depth_1d"}, {"heads_shape"},
         [](auto& n) { ModelBuilder::set_int(n, "axis", 0); });
  b.node("Reshape", {"x", "heads_shape"}, {"heads"});
  b.node("Transpose", {"heads"}, {"heads_first"}, [](auto& n) {
    ModelBuilder::set_ints(n, "perm", {0, 2, 1, 3});
  });
  b.node("Concat", {"rows_1d", "hidden_1d"}, {"rows_shape"},
         [](auto& n) { ModelBuilder::set_int(n, "axis", 0); });
  b.node("Reshape", {"heads_first", "rows_shape"}, {"rows_out"});
  // A constant target: [32, -1].
  b.node("Concat", {"hidden_1d", "minus_one"}, {"columns_shape"},
         [](auto& n) { ModelBuilder::set_int(n, "axis", 0); });
  b.node("Reshape", {"x", "columns_shape"}, {"columns_out"});
  // x[:, :T-1]: a bound computed from T.
  b.node("Slice", {"x", "axis0", "time_less_one_1d", "axis1"}, {"shorter"});
  // x's shape backwards, [32, T, B], by a Slice of negative step over the shape.
  b.initializer_i64("last", {1}, {-1}).initializer_i64("before_first", {1}, {-4});
  b.node("Slice", {"s", "last", "before_first", "axis0", "minus_one"}, {"reversed_shape"});
  b.node("Reshape", {"x", "reversed_shape"}, {"reversed"});
  // Ones of [B, T] and the positions 0 .. T-1.
  b.node("Concat", {"batch_1d", "time_1d"}, {"bt"},
         [](auto& n) { ModelBuilder::set_int(n, "axis", 0); });
  b.node("ConstantOfShape", {"bt"}, {"ones"});
  b.node("Range", {"zero", "time", "one"}, {"positions"});
  b.output_any("rows_out", kFloat).output_any("columns_out", kFloat);
  b.output_any("shorter", kFloat).output_any("ones", kFloat).output_any("positions", kInt64);
  b.output_any("reversed", kFloat);
  return b.bytes();
}

TEST(ShapeArithmetic, ChainsFromTheInputsShapeBecomeFormulasWithTheSameAnswers) {
  const std::string bytes = head_split_model();
  const Graph g = optimized(bytes);
  for (const char* op : {"Shape", "Gather", "Unsqueeze", "Concat", "Div", "Mul", "Sub"})
    EXPECT_EQ(count_op(g, op), 0u) << op << " left";
  EXPECT_EQ(count_op(g, "Slice"), 1u) << "the Slice of the shape is left";  // (x's stays)
  // Formulas for the targets and bounds that depend on B or T (heads, rows, the Slice's end,
  // ConstantOfShape's and Range's operands); the constant target is an initializer.
  EXPECT_GE(count_op(g, "ShapeFormula"), 4u);
  const Tensor* columns = nullptr;
  for (const Node& n : g.nodes)
    if (n.op_type == "Reshape" && n.outputs[0] == "columns_out")
      columns = constant_value(g, n.inputs[1]);
  ASSERT_TRUE(columns) << "the constant target was not folded";
  ASSERT_EQ(columns->numel(), 2);
  EXPECT_EQ(columns->data<int64_t>()[0], 32);
  EXPECT_EQ(columns->data<int64_t>()[1], -1);

  std::mt19937 rng(5);
  for (const Shape& shape : {Shape{1, 5, 32}, Shape{2, 7, 32}, Shape{3, 1, 32}, Shape{2, 7, 32}})
    expect_same_as_unoptimized(bytes, {{"x", random_tensor(shape, rng)}}, 0);  // data moves only
}

// After convolutions and pools, spatial sizes are known where the input's are (the kernels' own
// window geometry: strides, pads, ceil_mode), the batch stays a symbol: a flatten written as
// Reshape(y, [Shape(y)[0], C * H * W]) becomes a formula over x's batch.
TEST(ShapeArithmetic, ConvolutionAndPoolOutputSizesFollowTheirWindows) {
  ModelBuilder b;
  std::mt19937 rng(8);
  b.input("x", kFloat, {-1, 3, 11, 9});
  b.initializer("W", {4, 3, 3, 3}, testing::uniform_values(rng, 4 * 3 * 3 * 3));
  b.initializer_i64("zero", {}, {0}).initializer_i64("axis0", {1}, {0});
  b.node("Conv", {"x", "W"}, {"c"}, [](auto& n) {
    ModelBuilder::set_ints(n, "strides", {2, 2});
    ModelBuilder::set_ints(n, "pads", {1, 0, 1, 1});
  });  // [B, 4, 6, 4]
  b.node("MaxPool", {"c"}, {"p"}, [](auto& n) {
    ModelBuilder::set_ints(n, "kernel_shape", {2, 2});
    ModelBuilder::set_ints(n, "strides", {2, 2});
    ModelBuilder::set_int(n, "ceil_mode", 1);
  });  // [B, 4, 3, 2]: the last windows in part past the map
  b.node("Shape", {"p"}, {"s"});
  b.node("Gather", {"s", "zero"}, {"batch"});
  b.node("Unsqueeze", {"batch", "axis0"}, {"batch_1d"});
  b.node("ReduceProd", {"s"}, {"all"}, [](auto& n) { ModelBuilder::set_int(n, "keepdims", 1); });
  b.node("Div", {"all", "batch_1d"}, {"per_image"});
  b.node("Concat", {"batch_1d", "per_image"}, {"flat_shape"},
         [](auto& n) { ModelBuilder::set_int(n, "axis", 0); });
  b.node("Reshape", {"p", "flat_shape"}, {"y"});
  b.output_any("y", kFloat);
  const std::string bytes = b.bytes();
  const Graph g = optimized(bytes);
  for (const char* op : {"Shape", "Gather", "Concat", "Div"})
    EXPECT_EQ(count_op(g, op), 0u) << op << " left";
  for (int64_t batch : {1, 3, 2}) {
    const auto got = Session::from_bytes(bytes.data(), bytes.size(), test_options())
                         .run({{"x", random_tensor({batch, 3, 11, 9}, rng)}});
    EXPECT_EQ(got[0].tensor().shape(), (Shape{batch, 24}));
    expect_same_as_unoptimized(bytes, {{"x", random_tensor({batch, 3, 11, 9}, rng)}}, 2e-5f);
  }
}

// A value the graph returns, and one computed from an initializer the caller may override, keep
// their nodes: neither is known before the run.
TEST(ShapeArithmetic, OutputsAndOverridableInitializersKeepTheirNodes) {
  ModelBuilder b;
  b.input("x", kFloat, {-1, 6}).input("target", kInt64, {2});
  b.initializer_i64("target", {2}, {3, -1});
  b.initializer_i64("zero", {1}, {0});
  b.node("Shape", {"x"}, {"s"});
  b.node("Add", {"target", "zero"}, {"target_again"});
  b.node("Reshape", {"x", "target_again"}, {"y"});
  b.output_any("s", kInt64).output_any("y", kFloat);
  const std::string bytes = b.bytes();
  const Graph g = optimized(bytes);
  EXPECT_EQ(count_op(g, "Shape"), 1u);
  EXPECT_EQ(count_op(g, "ShapeFormula"), 0u);
  std::mt19937 rng(6);
  const Tensor x = random_tensor({4, 6}, rng);
  expect_same_as_unoptimized(bytes, {{"x", x}}, 0);
  expect_same_as_unoptimized(bytes, {{"x", x}, {"target", Tensor::from<int64_t>({2, 12}, {2})}}, 0);
}

TEST(ShapeArithmetic, PolynomialsDivideOnlyWhereExact) {
  const SymDim t = DimPoly::symbol(0), b = DimPoly::symbol(1);
  const SymDim tb4 = multiply(multiply(t, b), DimPoly::constant(4));
  EXPECT_EQ(divide_exactly(tb4, multiply(b, DimPoly::constant(2))),
            multiply(t, DimPoly::constant(2)));
  EXPECT_FALSE(divide_exactly(tb4, DimPoly::constant(3)));        // 4TB / 3
  EXPECT_FALSE(divide_exactly(add(t, DimPoly::constant(1)), b));  // (T + 1) / B
  EXPECT_FALSE(divide_exactly(t, DimPoly::constant(0)));
  EXPECT_EQ(subtract(add(t, b), b), t);
  EXPECT_EQ(subtract(t, t)->as_constant(), 0);
  EXPECT_FALSE(multiply(DimPoly::constant(INT64_MAX), DimPoly::constant(2)));  // overflow
}

// A model naming volt's internal op with a malformed formula is refused with an error.
TEST(ShapeArithmetic, MalformedFormulasAreModelErrors) {
  for (const std::vector<int64_t>& code :
       {std::vector<int64_t>{1, 1, 1, 1, 0},     // ends inside the term
        std::vector<int64_t>{1, 1, 1, 1, 3, 0},  // input 3 of one
        std::vector<int64_t>{1, 1, 1, 1, 0, 9},  // axis 9 of a rank-2 input
        std::vector<int64_t>{1, 0, 7}}) {        // trailing entries
    ModelBuilder b;
    b.import_domain("ai.volt", 1);
    b.input("x", kFloat, {2, 3});
    b.node("ShapeFormula", {"x"}, {"s"}, [&](auto& n) {
      n.set_domain("ai.volt");
      ModelBuilder::set_ints(n, "formula", code);
      ModelBuilder::set_int(n, "to", kInt64);
    });
    b.output_any("s", kInt64);
    const std::string bytes = b.bytes();
    try {
      Session s = Session::from_bytes(bytes.data(), bytes.size(), test_options());
      s.run({{"x", Tensor::empty(DType::Float, {2, 3})}});
      ADD_FAILURE() << "formula accepted: " << code.size() << " entries";
    } catch (const Error& e) {
      EXPECT_TRUE(e.code() == ErrorCode::InvalidModel || e.code() == ErrorCode::InvalidArgument)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace volt
