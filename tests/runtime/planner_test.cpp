#include <gtest/gtest.h>

#include <random>

#include "loaders/loader.hpp"
#include "model_builder.hpp"
#include "runtime/compiled_graph.hpp"
#include "runtime/executor.hpp"
#include "runtime/passes/passes.hpp"
#include "runtime/plan.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

std::unique_ptr<Plan> plan_of(const CompiledGraph& cg,
                              const std::vector<std::pair<std::string, Shape>>& inputs) {
  PlanInputs in;
  in.types.resize(cg.names.size());
  in.fed.assign(cg.names.size(), 0);
  for (const auto& [name, shape] : inputs) {
    const int id = cg.id(name);
    in.types[id] = TypeShape{ValueInfo::Kind::Tensor, DType::Float, shape, true};
    in.fed[id] = 1;
  }
  return build_plan(cg, in, 1);
}

TEST(Planner, ChainOfOpsReusesTheArena) {
  // x -> Relu -> Sigmoid -> Relu -> Tanh -> Relu -> y over 1000 floats: in-place where the
  // input dies, so the arena holds far less than four intermediates.
  ModelBuilder b;
  b.input("x", 1, {1000}).output("y", 1, {1000});
  b.node("Relu", {"x"}, {"a"})
      .node("Sigmoid", {"a"}, {"b"})
      .node("Relu", {"b"}, {"c"})
      .node("Tanh", {"c"}, {"d"})
      .node("Relu", {"d"}, {"y"});
  const std::string bytes = b.bytes();
  Model m = load_model_from_bytes(bytes.data(), bytes.size());
  auto g = std::make_shared<const Graph>(m.graph);
  CompiledGraph cg = compile_graph(g, "test", "cpu");
  auto plan = plan_of(cg, {{"x", {1000}}});
  EXPECT_EQ(plan->steps.size(), 5u);
  EXPECT_LE(plan->arena_bytes, 2 * 4096u) << plan->describe();
  EXPECT_NE(plan->describe().find("arena"), std::string::npos);
}

TEST(Planner, ShapeArithmeticIsFoldedAtPlanTime) {
  // y = Reshape(x, Concat(Shape(x)[0], -1)): Shape/Gather/Concat become constants of the plan.
  ModelBuilder b;
  b.input("x", 1, {-1, 3, 4})
      .output("y", 1, {-1, 12})
      .initializer_i64("zero", {1}, {0})
      .initializer_i64("minus1", {1}, {-1});
  b.node("Shape", {"x"}, {"s"})
      .node("Gather", {"s", "zero"}, {"n"})
      .node("Concat", {"n", "minus1"}, {"target"},
            [](auto& n) { ModelBuilder::set_int(n, "axis", 0); });
  b.node("Reshape", {"x", "target"}, {"y"});
  const std::string bytes = b.bytes();
  Model m = load_model_from_bytes(bytes.data(), bytes.size());
  CompiledGraph cg = compile_graph(std::make_shared<const Graph>(m.graph), "test", "cpu");
  auto plan = plan_of(cg, {{"x", {2, 3, 4}}});
  ASSERT_EQ(plan->steps.size(), 1u) << plan->describe();
  EXPECT_EQ(plan->types[cg.id("y")].shape, (Shape{2, 12}));
  Tensor x = Tensor::empty(DType::Float, {2, 3, 4});
  Value xv = x;
  std::vector<const Value*> fed(cg.names.size(), nullptr);
  fed[cg.id("x")] = &xv;
  auto out = execute_plan(*plan, fed);
  EXPECT_EQ(out[0].tensor().shape(), (Shape{2, 12}));
}

TEST(Passes, DeadNodesAndUnusedInitializersAreRemoved) {
  ModelBuilder b;
  b.input("x", 1, {2}).output("y", 1, {2}).initializer("unused", {1}, {1.0f});
  b.node("Relu", {"x"}, {"y"}).node("Sigmoid", {"x"}, {"dead"}).node("Tanh", {"dead"}, {"dead2"});
  const std::string bytes = b.bytes();
  Model m = load_model_from_bytes(bytes.data(), bytes.size());
  Graph g = eliminate_dead_nodes(m.graph);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op_type, "Relu");
  EXPECT_TRUE(g.initializers.empty());
}

TEST(Passes, ConvAddReluFuseIntoOneConvWithTheSameResult) {
  // y = Relu(Conv(x, W, B) + r); z = Relu(Conv(x, W2)) — both fuse; a Conv whose output is read
  // twice does not.
  ModelBuilder b;
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> w(8 * 3 * 3 * 3), w2(8 * 3 * 1 * 1), bias(8);
  for (float& v : w) v = u(rng);
  for (float& v : w2) v = u(rng);
  for (float& v : bias) v = u(rng);
  b.input("x", 1, {2, 3, 9, 9})
      .input("r", 1, {2, 8, 9, 9})
      .output("y", 1, {2, 8, 9, 9})
      .output("z", 1, {2, 8, 9, 9})
      .output("c3", 1, {2, 8, 9, 9});
  b.initializer("W", {8, 3, 3, 3}, w)
      .initializer("W2", {8, 3, 1, 1}, w2)
      .initializer("B", {8}, bias);
  b.node("Conv", {"x", "W", "B"}, {"c"}, [](auto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  b.node("Add", {"c", "r"}, {"s"}).node("Relu", {"s"}, {"y"});
  b.node("Conv", {"x", "W2"}, {"c2"}).node("Relu", {"c2"}, {"z"});
  b.node("Conv", {"x", "W2"}, {"c3"}).node("Relu", {"c3"}, {"unused"});
  const std::string bytes = b.bytes();
  Model m = load_model_from_bytes(bytes.data(), bytes.size());
  const Graph fused = fuse_conv_activation(m.graph);
  int convs = 0, others = 0;
  for (const Node& n : fused.nodes) (n.op_type == "Conv" ? convs : others)++;
  EXPECT_EQ(convs, 3);
  EXPECT_EQ(others, 1);  // the Relu after the Conv whose output is also a graph output stays

  Tensor x = Tensor::empty(DType::Float, {2, 3, 9, 9}),
         r = Tensor::empty(DType::Float, {2, 8, 9, 9});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
  for (int64_t i = 0; i < r.numel(); ++i) r.data<float>()[i] = u(rng);
  Session plain = Session::from_bytes(bytes.data(), bytes.size(), {.optimization_level = 0});
  Session opt = Session::from_bytes(bytes.data(), bytes.size(), {.optimization_level = 2});
  const auto a = plain.run({{"x", x}, {"r", r}}), c = opt.run({{"x", x}, {"r", r}});
  for (size_t k = 0; k < a.size(); ++k)
    for (int64_t i = 0; i < a[k].tensor().numel(); ++i)
      ASSERT_NEAR(a[k].tensor().data<float>()[i], c[k].tensor().data<float>()[i], 1e-5f)
          << "output " << k << " element " << i;
}

}  // namespace
}  // namespace volt
