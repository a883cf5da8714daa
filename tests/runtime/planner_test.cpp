#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "loaders/loader.hpp"
#include "model_builder.hpp"
#include "operators/common/cpu_isa.hpp"
#include "operators/common/packed_weights.hpp"
#include "runtime/compiled_graph.hpp"
#include "runtime/contexts.hpp"
#include "runtime/executor.hpp"
#include "runtime/graph_runner.hpp"
#include "runtime/passes/passes.hpp"
#include "runtime/plan.hpp"

namespace volt {
namespace {

using testing::uniform_tensor;
using testing::uniform_values;

// Runs `runner` on x as its input "x".
std::vector<Value> run_on(GraphRunner& runner, const Tensor& x) {
  Value xv = x;
  std::vector<const Value*> fed(runner.compiled().names.size(), nullptr);
  fed[runner.compiled().id("x")] = &xv;
  return runner.run(fed);
}

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

// A Gather of one index and a Slice whose window is one contiguous run of the input output a
// view of it (GPT-2's layers of a stacked past cost a copy each otherwise), as does a Transpose
// that moves only axes of one element; the others copy.
// A view of an arena value keeps that value's bytes from being reused while the view is read,
// and a view that is a graph output reaches the caller as a copy of its own.
TEST(Planner, ContiguousGathersAndSlicesAreViews) {
  constexpr int64_t kPlane = 16 * 20;  // (views start at 1 KiB: below, a copy costs as much)
  ModelBuilder b;
  b.input("x", 1, {1, 3, 16, 20})
      .input("m", 1, {2, 256})
      .output("layer", 1, {1, 16, 20})
      .output("rows", 1, {1, 2, 16, 20})
      .output("columns", 1, {1, 3, 2, 20})
      .output("last", 1, {1, 3, 20})
      .output("sum", 1, {256})
      .output("swapped", 1, {3, 1, 16, 20})
      .output("transposed", 1, {1, 3, 20, 16})
      .initializer_i64("one", {}, {1})
      .initializer_i64("minus_one", {}, {-1})
      .initializer_i64("zero", {}, {0})
      .initializer_i64("starts", {1}, {1})
      .initializer_i64("ends", {1}, {3})
      .initializer_i64("axis1", {1}, {1})
      .initializer_i64("axis2", {1}, {2});
  auto axis = [](int64_t a) { return [a](auto& n) { ModelBuilder::set_int(n, "axis", a); }; };
  b.node("Gather", {"x", "one"}, {"layer"}, axis(1))
      .node("Slice", {"x", "starts", "ends", "axis1"}, {"rows"})
      .node("Slice", {"x", "starts", "ends", "axis2"}, {"columns"})
      .node("Gather", {"x", "minus_one"}, {"last"}, axis(2))
      // a = Relu(m) is read through a view of its second row after Neg(m) is computed: its
      // bytes must still be a's then.
      .node("Relu", {"m"}, {"a"})
      .node("Gather", {"a", "one"}, {"a_row"}, axis(0))
      .node("Neg", {"m"}, {"n"})
      .node("Gather", {"n", "zero"}, {"n_row"}, axis(0))
      .node("Add", {"a_row", "n_row"}, {"sum"})
      .node("Transpose", {"x"}, {"swapped"},
            [](auto& n) {
              ModelBuilder::set_ints(n, "perm", {1, 0, 2, 3});
            })
      .node("Transpose", {"x"}, {"transposed"}, [](auto& n) {
        ModelBuilder::set_ints(n, "perm", {0, 1, 3, 2});
      });
  const std::string bytes = b.bytes();
  Model model = load_model_from_bytes(bytes.data(), bytes.size());
  CompiledGraph cg = compile_graph(std::make_shared<const Graph>(model.graph), "test", "cpu");
  auto plan = plan_of(cg, {{"x", {1, 3, 16, 20}}, {"m", {2, 256}}});
  for (const char* view : {"layer", "rows", "a_row", "n_row", "swapped"})
    EXPECT_EQ(plan->placement[cg.id(view)], Placement::View) << view << "\n" << plan->describe();
  EXPECT_EQ(plan->placement[cg.id("a")], Placement::Arena) << plan->describe();
  for (const char* copy : {"columns", "last", "transposed"})
    EXPECT_NE(plan->placement[cg.id(copy)], Placement::View) << copy;

  std::vector<float> xs(3 * kPlane), ms(512);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i);
  for (size_t i = 0; i < ms.size(); ++i) ms[i] = static_cast<float>(i) - 100.0f;
  Value x = Tensor::from(xs, {1, 3, 16, 20}), m = Tensor::from(ms, {2, 256});
  std::vector<const Value*> fed(cg.names.size(), nullptr);
  fed[cg.id("x")] = &x;
  fed[cg.id("m")] = &m;
  const std::vector<Value> out = execute_plan(*plan, fed);
  auto at = [&](size_t output, int64_t i) { return out[output].tensor().data<float>()[i]; };
  for (int64_t i = 0; i < kPlane; ++i) ASSERT_EQ(at(0, i), xs[kPlane + i]) << "layer " << i;
  for (int64_t i = 0; i < 2 * kPlane; ++i) ASSERT_EQ(at(1, i), xs[kPlane + i]) << "rows " << i;
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t j = 0; j < 40; ++j)
      ASSERT_EQ(at(2, c * 40 + j), xs[c * kPlane + 20 + j]) << "columns " << c << " " << j;
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t j = 0; j < 20; ++j)
      ASSERT_EQ(at(3, c * 20 + j), xs[c * kPlane + 15 * 20 + j]) << "last " << c << " " << j;
  for (int64_t j = 0; j < 256; ++j)
    ASSERT_EQ(at(4, j), std::max(ms[256 + j], 0.0f) - ms[j]) << "sum " << j;
  for (int64_t i = 0; i < 3 * kPlane; ++i) ASSERT_EQ(at(5, i), xs[i]) << "swapped " << i;
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t w = 0; w < 20; ++w)
      for (int64_t h = 0; h < 16; ++h)
        ASSERT_EQ(at(6, c * kPlane + w * 16 + h), xs[c * kPlane + h * 20 + w]) << "transposed";
  // The outputs are the caller's: none points into the input.
  const char* x_begin = static_cast<const char*>(x.tensor().raw());
  for (const Value& v : out) {
    const char* p = static_cast<const char*>(v.tensor().raw());
    EXPECT_FALSE(p >= x_begin && p < x_begin + x.tensor().nbytes());
  }
}

// A view is only what the plan made room for: a Slice whose starts come at run time is chosen
// then, and its output must not be a view of an arena value the plan lets a later step reuse.
// The contract (a run-time context refuses, the kernel then keeps no view state), then a model
// with such a Slice, whose values must hold for several starts.
TEST(Planner, ViewsDecidedAtRunTimeAreCopies) {
  {
    ModelBuilder one;
    one.input("x", 1, {4, 256}).output("s", 1, {2, 256});
    one.initializer_i64("starts", {1}, {1}).initializer_i64("ends", {1}, {3});
    one.node("Slice", {"x", "starts", "ends"}, {"s"});
    const std::string bytes = one.bytes();
    Model model = load_model_from_bytes(bytes.data(), bytes.size());
    const Node& node = model.graph.nodes[0];
    const TypeShape x{ValueInfo::Kind::Tensor, DType::Float, {4, 256}, true};
    const Value starts = model.graph.initializers.at("starts"),
                ends = model.graph.initializers.at("ends");
    const TypeShape starts_type = TypeShape::of(starts), ends_type = TypeShape::of(ends);
    const std::vector<const TypeShape*> types = {&x, &starts_type, &ends_type};
    const std::vector<const Value*> values = {nullptr, &starts, &ends};
    const KernelDef* def = KernelRegistry::instance().candidates(node, "cpu", DType::Float)[0];
    const auto kernel = def->create(node);
    for (const bool planning : {true, false}) {
      NodeInferContext ctx(node, types, values, 1);
      ctx.views_allowed = planning;
      kernel->infer(ctx);
      EXPECT_EQ(ctx.output_is_view, planning);
      EXPECT_EQ(ctx.state != nullptr, planning) << "a view's state where no view is placed";
    }
  }
  ModelBuilder b;
  b.input("x", 1, {4, 256})
      .input("starts", 7, {1})
      .output("y", 1, {-1, 256})
      .initializer_i64("ends", {1}, {3})
      .initializer_i64("axis0", {1}, {0})
      .initializer_i64("zero", {}, {0});
  b.node("Relu", {"x"}, {"a"})
      .node("Slice", {"a", "starts", "ends", "axis0"}, {"s"})
      .node("ReduceSum", {"s"}, {"total"})
      .node("Sub", {"x", "total"}, {"n"})
      .node("Gather", {"n", "zero"}, {"row"}, [](auto& n) { ModelBuilder::set_int(n, "axis", 0); })
      .node("Add", {"s", "row"}, {"y"});
  const std::string bytes = b.bytes();
  const Session session = Session::from_bytes(bytes.data(), bytes.size());
  std::vector<float> xs(4 * 256);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 7) - 3.0f;
  for (const int64_t start : {1, 0, 2}) {
    NamedValues feeds;
    feeds.emplace_back("x", Tensor::from(xs, {4, 256}));
    feeds.emplace_back("starts", Tensor::from(std::vector<int64_t>{start}, {1}));
    const Tensor y = session.run(feeds)[0].tensor();
    ASSERT_EQ(y.shape(), (Shape{3 - start, 256}));
    float total = 0;
    for (int64_t i = start * 256; i < 3 * 256; ++i) total += std::max(xs[i], 0.0f);
    for (int64_t r = 0; r < 3 - start; ++r)
      for (int64_t j = 0; j < 256; ++j)
        ASSERT_FLOAT_EQ(y.data<float>()[r * 256 + j],
                        std::max(xs[(start + r) * 256 + j], 0.0f) + xs[j] - total)
            << "start " << start << " row " << r << " column " << j;
  }
}

// A Concat of one image computes each input in its part of the output where the input is a
// buffer of its own: no copy, nested Concats included. A part read after the Concat is not
// written over in place (a - sum(c), where a dies, would otherwise overwrite c's first half
// before the second Concat reads it).
TEST(Planner, ConcatPartsAreComputedInPlace) {
  ModelBuilder b;
  constexpr int64_t kWidth = 1024;  // (parts are offered from 4 KiB of output)
  b.input("x", 1, {1, kWidth}).output("y", 1, {1, 3 * kWidth}).output("z", 1, {1, kWidth});
  auto axis1 = [](auto& n) { ModelBuilder::set_int(n, "axis", 1); };
  b.node("Relu", {"x"}, {"a"})
      .node("Sigmoid", {"x"}, {"s"})
      .node("Concat", {"a", "s"}, {"c"}, axis1)
      .node("ReduceSum", {"c"}, {"total"})
      .node("Sub", {"a", "total"}, {"minus_a"})
      .node("Exp", {"minus_a"}, {"e"})
      .node("Concat", {"c", "e"}, {"c2"}, axis1)
      .node("Tanh", {"c2"}, {"y"})
      .node("Identity", {"minus_a"}, {"z"});
  const std::string bytes = b.bytes();
  Model model = load_model_from_bytes(bytes.data(), bytes.size());
  CompiledGraph cg = compile_graph(std::make_shared<const Graph>(model.graph), "test", "cpu");
  auto plan = plan_of(cg, {{"x", {1, kWidth}}});
  const int64_t at = plan->arena_offset[cg.id("c2")];
  ASSERT_GE(at, 0) << plan->describe();
  EXPECT_EQ(plan->arena_offset[cg.id("c")], at) << plan->describe();
  EXPECT_EQ(plan->arena_offset[cg.id("a")], at) << plan->describe();
  EXPECT_EQ(plan->arena_offset[cg.id("s")], at + 4 * kWidth) << plan->describe();
  EXPECT_EQ(plan->arena_offset[cg.id("e")], at + 8 * kWidth) << plan->describe();

  std::vector<float> xs(kWidth);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 16) / 4.0f - 2.0f;
  Value x = Tensor::from(xs, {1, kWidth});
  std::vector<const Value*> fed(cg.names.size(), nullptr);
  fed[cg.id("x")] = &x;
  float total = 0;
  for (float v : xs) total += std::max(v, 0.0f) + 1.0f / (1.0f + std::exp(-v));
  for (int run = 0; run < 2; ++run) {  // (the second run finds the arena as the first left it)
    const std::vector<Value> out = execute_plan(*plan, fed);
    const float* y = out[0].tensor().data<float>();
    const float* z = out[1].tensor().data<float>();
    for (size_t i = 0; i < kWidth; ++i) {
      ASSERT_NEAR(y[i], std::tanh(std::max(xs[i], 0.0f)), 1e-6f) << i;
      ASSERT_NEAR(y[kWidth + i], std::tanh(1.0f / (1.0f + std::exp(-xs[i]))), 1e-6f) << i;
      ASSERT_NEAR(y[2 * kWidth + i], std::tanh(std::exp(std::max(xs[i], 0.0f) - total)), 1e-6f)
          << i;
      ASSERT_NEAR(z[i], std::max(xs[i], 0.0f) - total, total * 1e-6f) << i;
    }
  }
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

// Weights that oneDNN kernels reorder into their own layouts are held once: the plan keeps the
// kernels' copies and drops the model's, unless another step reads the weight itself.
TEST(Planner, WeightsThatKernelsKeepCopiesOfAreReleased) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto random = [&](size_t n) { return uniform_values(rng, n); };
  ModelBuilder b;
  b.input("x", 1, {-1, 16})
      .input("img", 1, {-1, 2, 5, 5})
      .output("y", 1, {-1, 8})
      .output("g", 1, {-1, 4})
      .output("c", 1, {-1, 3, 5, 5})
      .output("shared", 1, {-1, 8})
      .input("z", 1, {16, 8})
      .output("zs", 1, {16, 8})
      .initializer("W", {16, 8}, random(128))
      .initializer("Wt", {4, 16}, random(64))  // Gemm's B, transposed
      .initializer("K", {3, 2, 3, 3}, random(54))
      .initializer("S", {16, 8}, random(128));
  b.node("MatMul", {"x", "W"}, {"y"});
  b.node("Gemm", {"x", "Wt"}, {"g"}, [](auto& n) { ModelBuilder::set_int(n, "transB", 1); });
  b.node("Conv", {"img", "K"}, {"c"}, [](auto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  // S is also read whole by an Add at run time: it stays. (A node of constants only would be
  // folded at plan time, and not count.)
  b.node("MatMul", {"x", "S"}, {"shared"}).node("Add", {"z", "S"}, {"zs"});
  const std::string bytes = b.bytes();
  Model m = load_model_from_bytes(bytes.data(), bytes.size());
  const Graph original = m.graph;
  CompiledGraph cg = compile_graph(std::make_shared<const Graph>(m.graph), "test", "cpu");
  PlanInputs in;
  in.types.resize(cg.names.size());
  in.fed.assign(cg.names.size(), 0);
  in.types[cg.id("x")] = TypeShape{ValueInfo::Kind::Tensor, DType::Float, {3, 16}, true};
  in.types[cg.id("img")] = TypeShape{ValueInfo::Kind::Tensor, DType::Float, {2, 2, 5, 5}, true};
  in.types[cg.id("z")] = TypeShape{ValueInfo::Kind::Tensor, DType::Float, {16, 8}, true};
  in.fed[cg.id("x")] = in.fed[cg.id("img")] = in.fed[cg.id("z")] = 1;
  auto plan = build_plan(cg, in, 1);

  std::set<std::string> released;
  for (const auto& [id, restore] : plan->released) {
    released.insert(cg.names[id]);
    const Tensor& held = plan->constants[id]->tensor();
    EXPECT_EQ(held.raw(), nullptr) << cg.names[id] << ": the plan still holds its data";
    EXPECT_EQ(held.shape(), original.initializers.at(cg.names[id]).shape());
    // The way back rebuilds the weight bit for bit.
    const Tensor back = restore();
    const Tensor& want = original.initializers.at(cg.names[id]);
    ASSERT_EQ(back.shape(), want.shape());
    EXPECT_EQ(std::memcmp(back.raw(), want.raw(), want.nbytes()), 0) << cg.names[id];
  }
  // W (a MatMul's weights) is copied and released where its primitive packs it into a layout of
  // its own (blocked rows on AVX2); where the primitive reads plain rows, as oneDNN's gemm does
  // on AVX-512 for a few rows, it reads the graph's tensor and there is nothing to release.
  // Wt's primitive reads it transposed, K's blocked: always copies.
  if (!released.count("W")) {
    EXPECT_EQ(plan->constants[cg.id("W")]->tensor().raw(), cg.graph->initializers.at("W").raw());
  }
  released.erase("W");
  EXPECT_EQ(released, (std::set<std::string>{"Wt", "K"}));

  // The plan runs without the dropped data (a kernel reading it would fault on its null
  // pointer) and computes what an unoptimized session computes.
  Tensor x = Tensor::empty(DType::Float, {3, 16}), img = Tensor::empty(DType::Float, {2, 2, 5, 5}),
         z = Tensor::empty(DType::Float, {16, 8});
  for (Tensor* t : {&x, &img, &z})
    for (int64_t i = 0; i < t->numel(); ++i) t->data<float>()[i] = u(rng);
  Value xv = x, iv = img, zv = z;
  std::vector<const Value*> fed(cg.names.size(), nullptr);
  fed[cg.id("x")] = &xv;
  fed[cg.id("img")] = &iv;
  fed[cg.id("z")] = &zv;
  const auto got = execute_plan(*plan, fed);
  Session reference = Session::from_bytes(bytes.data(), bytes.size(), {.optimization_level = 0});
  const auto want = reference.run({{"x", x}, {"img", img}, {"z", z}});
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k)
    for (int64_t i = 0; i < want[k].tensor().numel(); ++i)
      ASSERT_NEAR(got[k].tensor().data<float>()[i], want[k].tensor().data<float>()[i], 1e-4f)
          << "output " << k << " element " << i;
}

// A session's runner drops the weights its first plan keeps copies of from its graph too; a
// second plan (a new input shape) rebuilds them, and from then on the graph keeps them, so that
// later shapes cost no rebuild. Every plan computes the same as before.
// (A Gemm reading W transposed: its primitive always keeps a copy in a layout of its own.)
TEST(GraphRunner, TheFirstPlanReleasesWeightsAndTheSecondBringsThemBackForGood) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> w(64 * 32);  // W[c][k], 32 x 64
  for (auto& e : w) e = u(rng);
  ModelBuilder b;
  b.input("x", 1, {-1, 64}).output("y", 1, {-1, 32}).initializer("W", {32, 64}, w);
  b.node("Gemm", {"x", "W"}, {"y"}, [](auto& n) { ModelBuilder::set_int(n, "transB", 1); });
  const std::string bytes = b.bytes();
  Model m = load_model_from_bytes(bytes.data(), bytes.size());
  auto graph = std::make_shared<Graph>(m.graph);
  auto runner = GraphRunner::owning(graph, "test", "cpu", 1, 4);
  int plans = 0;
  for (int64_t batch : {2, 5, 2, 7}) {
    Tensor x = Tensor::empty(DType::Float, {batch, 64});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
    Value xv = x;
    std::vector<const Value*> fed(runner->compiled().names.size(), nullptr);
    fed[runner->compiled().id("x")] = &xv;
    const Tensor y = runner->run(fed)[0].tensor();
    if (batch != 2) ++plans;
    EXPECT_EQ(graph->initializers.count("W"), plans == 0 ? 0u : 1u) << "batch " << batch;
    for (int64_t r = 0; r < batch; ++r)
      for (int64_t c = 0; c < 32; ++c) {
        double want = 0;
        for (int64_t k = 0; k < 64; ++k)
          want += double(x.data<float>()[r * 64 + k]) * w[static_cast<size_t>(c * 64 + k)];
        ASSERT_NEAR(y.data<float>()[r * 32 + c], want, 1e-4) << "batch " << batch;
      }
  }
  EXPECT_EQ(runner->cached_plans(), 3u);
}

// A ConvTranspose computed as a 1x1 convolution and a gather packs W's rows permuted (tap-major),
// through a plain staging copy (dnnl_adapter::pack_constant_staged): the first plan releases W
// all the same, and the second rebuilds it exactly through the same staging, backwards.
TEST(GraphRunner, ConvTransposeWeightsPackedThroughStagingComeBackExactly) {
  std::mt19937 rng(17);
  const std::vector<float> eye = [] {
    std::vector<float> v(16 * 16, 0.0f);
    for (size_t i = 0; i < 16; ++i) v[i * 16 + i] = 1.0f;
    return v;
  }();
  const std::vector<float> w = uniform_values(rng, 16 * 8 * 3 * 3);
  ModelBuilder b;
  b.input("x", 1, {1, 16, -1, -1}).output_any("y", 1);
  b.initializer("I", {16, 16, 1, 1}, eye).initializer("W", {16, 8, 3, 3}, w);
  b.node("Conv", {"x", "I"}, {"c"});  // puts the ConvTranspose in a channels-last or blocked region
  b.node("ConvTranspose", {"c", "W"}, {"y"}, [](auto& n) {
    ModelBuilder::set_ints(n, "strides", {2, 2});
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  const std::string bytes = b.bytes();
  Model m = load_model_from_bytes(bytes.data(), bytes.size());
  auto graph = std::make_shared<Graph>(run_passes(m.graph, {}));
  auto runner = GraphRunner::owning(graph, "test", "cpu", 1, 4);
  Session reference = Session::from_bytes(bytes.data(), bytes.size(), {.optimization_level = 0});
  for (int64_t size : {5, 7}) {
    const Tensor x = uniform_tensor(rng, {1, 16, size, size});
    const auto got = run_on(*runner, x);
    if (size == 5) {
      EXPECT_EQ(graph->initializers.count("W"), 0u) << "W stayed beside its packed copy";
    } else {
      ASSERT_EQ(graph->initializers.count("W"), 1u);
      EXPECT_EQ(std::memcmp(graph->initializers.at("W").raw(), w.data(), w.size() * sizeof(float)),
                0)
          << "W was not rebuilt exactly";
    }
    const Tensor want = reference.run({{"x", x}})[0].tensor();
    ASSERT_EQ(got[0].tensor().shape(), want.shape());
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_NEAR(got[0].tensor().data<float>()[i], want.data<float>()[i], 1e-4) << size;
  }
}

// Weights that every reader copies into bf16 (MatMuls computing in bf16) are released too: the
// plan holds half the bytes, not the fp32 weight beside its bf16 copy. The second plan rebuilds
// them rounded to bf16, which the bf16 readers cannot tell from the original; a weight that an
// fp32 reader also copies (Gemm) is rebuilt exactly, from that reader's copy.
TEST(GraphRunner, WeightsCopiedIntoBf16AreReleasedAndComeBackRoundedOrExact) {
  if (!cpu_has_bf16_kernels()) GTEST_SKIP() << "oneDNN has no bf16 kernels on this CPU";
  std::mt19937 rng(13);
  const std::vector<float> w = uniform_values(rng, 64 * 32), w2 = uniform_values(rng, 32 * 16);
  ModelBuilder b;
  b.input("x", 1, {-1, 64})
      .output("y", 1, {-1, 16})
      .output("g", 1, {-1, 32})
      .initializer("W", {64, 32}, w)
      .initializer("W2", {32, 16}, w2);
  b.node("MatMul", {"x", "W"}, {"h"}).node("MatMul", {"h", "W2"}, {"y"});
  b.node("Gemm", {"x", "W"}, {"g"});  // fp32: use_bf16 takes MatMuls and convolutions only
  const std::string bytes = b.bytes();
  Model m = load_model_from_bytes(bytes.data(), bytes.size());
  auto graph = std::make_shared<Graph>(use_bf16(m.graph));
  auto runner = GraphRunner::owning(graph, "test", "cpu", 1, 4);
  Session reference = Session::from_bytes(bytes.data(), bytes.size(), {.optimization_level = 0});
  for (int64_t batch : {2, 5}) {
    const Tensor x = uniform_tensor(rng, {batch, 64});
    const auto got = run_on(*runner, x);
    if (batch == 2) {
      EXPECT_EQ(graph->initializers.count("W"), 0u) << "W stayed beside its copies";
      EXPECT_EQ(graph->initializers.count("W2"), 0u) << "W2 stayed beside its bf16 copy";
    } else {
      const Tensor& back = graph->initializers.at("W");
      EXPECT_EQ(std::memcmp(back.raw(), w.data(), w.size() * sizeof(float)), 0)
          << "W was not rebuilt exactly from the Gemm's fp32 copy";
      const Tensor& rounded = graph->initializers.at("W2");
      for (size_t i = 0; i < w2.size(); ++i)
        ASSERT_EQ(rounded.data<float>()[i], static_cast<float>(BFloat16(w2[i]))) << i;
    }
    // bf16 products of 64 and then 32 terms in [-1, 1]: within 2e-2 of fp32 (bf16 keeps 8 bits).
    const auto want = reference.run({{"x", x}});
    for (size_t k = 0; k < 2; ++k)
      for (int64_t i = 0; i < want[k].tensor().numel(); ++i)
        ASSERT_NEAR(got[k].tensor().data<float>()[i], want[k].tensor().data<float>()[i],
                    k == 0 ? 0.1f : 1e-4f)
            << "batch " << batch << " output " << k << " element " << i;
  }
}

// Plans for new input shapes share the weights the first one packed into a primitive's layout:
// a convolution fed five image sizes reorders its weights once, and every size computes what an
// unoptimized session computes.
TEST(GraphRunner, PlansForNewShapesShareThePackedWeights) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> w(32 * 16 * 3 * 3);
  for (auto& e : w) e = u(rng);
  ModelBuilder b;
  b.input("x", 1, {1, 16, -1, -1})
      .output("y", 1, {1, 32, -1, -1})
      .initializer("W", {32, 16, 3, 3}, w);
  b.node("Conv", {"x", "W"}, {"y"}, [](auto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  const std::string bytes = b.bytes();
  Session fast = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 1});
  Session reference = Session::from_bytes(bytes.data(), bytes.size(), {.optimization_level = 0});
  const std::vector<int64_t> sizes = {8, 12, 20, 9, 12, 31};
  std::vector<Tensor> inputs, wanted;
  for (int64_t size : sizes) {
    inputs.push_back(Tensor::empty(DType::Float, {1, 16, size, size}));
    for (int64_t i = 0; i < inputs.back().numel(); ++i) inputs.back().data<float>()[i] = u(rng);
    wanted.push_back(reference.run({{"x", inputs.back()}})[0].tensor());
  }
  const size_t before =
      dnnl_adapter::packed_weights().packs();  // (the reference's plans packed too)
  for (size_t k = 0; k < sizes.size(); ++k) {
    const Tensor got = fast.run({{"x", inputs[k]}})[0].tensor();
    ASSERT_EQ(got.shape(), wanted[k].shape());
    for (int64_t i = 0; i < got.numel(); ++i)
      ASSERT_NEAR(got.data<float>()[i], wanted[k].data<float>()[i], 1e-4f) << "size " << sizes[k];
  }
  EXPECT_EQ(fast.cached_plans(), 5u);
  EXPECT_EQ(dnnl_adapter::packed_weights().packs() - before, 1u)
      << "the weights were packed again for a new input shape";
}

// Weights packed in a layout oneDNN cannot reorder out of (Winograd's, on AVX-512) are not
// released by the first plan: it could not rebuild them for a second shape, which failed with
// "could not create a primitive descriptor for a reorder primitive". A 3x3 convolution over 64
// channels (Winograd where the CPU has it) fed three sizes computes what an unoptimized session
// computes at each.
TEST(GraphRunner, WinogradWeightsServeNewShapes) {
  std::mt19937 rng(8);
  ModelBuilder b;
  b.input("x", 1, {1, 64, -1, -1}).output("y", 1, {1, 64, -1, -1});
  b.initializer("W", {64, 64, 3, 3}, uniform_values(rng, 64 * 64 * 9));
  b.node("Conv", {"x", "W"}, {"y"}, [](auto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  const std::string bytes = b.bytes();
  Session fast = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 1});
  Session reference = Session::from_bytes(bytes.data(), bytes.size(), {.optimization_level = 0});
  for (int64_t size : {12, 20, 7}) {
    Tensor x = Tensor::empty(DType::Float, {1, 64, size, size});
    const std::vector<float> values = uniform_values(rng, static_cast<size_t>(x.numel()));
    std::copy(values.begin(), values.end(), x.data<float>());
    const Tensor want = reference.run({{"x", x}})[0].tensor();
    const Tensor got = fast.run({{"x", x}})[0].tensor();
    ASSERT_EQ(got.shape(), want.shape());
    // Sums of 576 products of values in [-1, 1]; Winograd's transforms round at about 1e-5 of
    // the output's scale.
    float scale = 0;
    for (int64_t i = 0; i < want.numel(); ++i)
      scale = std::max(scale, std::abs(want.data<float>()[i]));
    for (int64_t i = 0; i < got.numel(); ++i)
      ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-4f * scale) << "size " << size;
  }
}

// Plans for a session's later shapes are shape-generic (cheaper to build: MatMuls with run-time
// dimensions); a shape that comes back gets, at its eighth run, a plan specialized
// to it in the generic one's place. The first shape's plan is specialized from the start. Every
// run, whichever plan it took, computes what an unoptimized session computes.
TEST(GraphRunner, RecurringShapesGetSpecializedPlans) {
  std::mt19937 rng(12);
  ModelBuilder b;
  b.input("x", 1, {1, 64, -1, -1}).output("y", 1, {1, 16});
  b.initializer("W", {64, 64, 3, 3}, uniform_values(rng, 64 * 64 * 9))
      .initializer("M", {64, 16}, uniform_values(rng, 64 * 16));
  b.node("Conv", {"x", "W"}, {"c"}, [](auto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  b.node("GlobalAveragePool", {"c"}, {"g"});
  b.node("Flatten", {"g"}, {"f"});
  b.node("MatMul", {"f", "M"}, {"y"});
  const std::string bytes = b.bytes();
  Model m = load_model_from_bytes(bytes.data(), bytes.size());
  auto graph = std::make_shared<Graph>(run_passes(m.graph, SessionOptions{}));
  auto runner = GraphRunner::owning(graph, "test", "cpu", 1, 8);
  Session reference = Session::from_bytes(bytes.data(), bytes.size(), {.optimization_level = 0});
  auto run = [&](int64_t size, bool want_generic) {
    Tensor x = Tensor::empty(DType::Float, {1, 64, size, size});
    const std::vector<float> values = uniform_values(rng, static_cast<size_t>(x.numel()));
    std::copy(values.begin(), values.end(), x.data<float>());
    Value xv = x;
    std::vector<const Value*> fed(runner->compiled().names.size(), nullptr);
    fed[runner->compiled().id("x")] = &xv;
    EXPECT_EQ(runner->plan_for(fed)->shape_generic, want_generic) << "size " << size;
    const Tensor got = runner->run(fed)[0].tensor();
    const Tensor want = reference.run({{"x", x}})[0].tensor();
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i],
                  1e-4f * (1.0f + std::abs(want.data<float>()[i])))
          << "size " << size;
  };
  // (plan_for counts as a run of the plan it returns, as run() does: each call below is two.)
  run(12, false);
  run(12, false);
  run(20, true);  // built generic (its first run), then its second run
  run(20, true);  // its third and fourth runs
  run(20, true);  // the fifth and sixth
  run(20, true);  // the seventh; the eighth is the specialized plan's
  run(20, false);
  run(16, true);
  EXPECT_EQ(runner->cached_plans(), 3u);
}

// From a session's second input shape on, MatMul and Gemm run oneDNN primitives with run-time
// dimensions (one primitive for every length, InferContext::shapes_vary): attention products
// with a folded Transpose, a batch of heads and a scale, a linear layer with bias and ReLU, a
// Gemm with transB; LayerNormalization runs a power-of-two count of rows over the first and the
// last rows; binary ops (same shapes, a scalar, a bias) on volt's loop rather than oneDNN's
// per-shape primitives. Each length computes what a fresh session's fixed-shape primitives
// compute, and none runs a reference loop.
TEST(GraphRunner, MatMulsServeNewLengthsWithTheSamePrimitives) {
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto values = [&](size_t n) { return uniform_values(rng, n); };
  ModelBuilder b(17);
  b.input("q", 1, {1, 4, -1, 16}).input("k", 1, {1, 4, -1, 16}).input("v", 1, {1, 4, -1, 16});
  b.input("x", 1, {-1, 32}).input("wide", 1, {-1, 128});
  b.initializer("W", {32, 8}, values(32 * 8)).initializer("bias", {8}, values(8));
  b.initializer("W2", {8, 32}, values(8 * 32)).initializer("bias2", {8}, values(8));
  b.initializer("scale", {}, {0.25f});
  b.initializer("ln_scale", {32}, values(32)).initializer("ln_bias", {32}, values(32));
  b.initializer("wide_bias", {128}, values(128));
  b.node("Transpose", {"k"}, {"kt"}, [](auto& n) {
    ModelBuilder::set_ints(n, "perm", {0, 1, 3, 2});
  });
  b.node("MatMul", {"q", "kt"}, {"scores"});
  b.node("Mul", {"scores", "scale"}, {"scaled"});
  b.node("Softmax", {"scaled"}, {"p"});
  b.node("MatMul", {"p", "v"}, {"attended"});
  b.node("MatMul", {"x", "W"}, {"xw"});
  b.node("Add", {"xw", "bias"}, {"xb"});
  b.node("Relu", {"xb"}, {"linear"});
  b.node("Gemm", {"x", "W2", "bias2"}, {"gemm"},
         [](auto& n) { ModelBuilder::set_int(n, "transB", 1); });
  b.node("LayerNormalization", {"x", "ln_scale", "ln_bias"}, {"normalized"});
  b.node("Add", {"wide", "wide_bias"}, {"biased"});
  b.node("Mul", {"biased", "wide"}, {"product"});
  b.node("Mul", {"product", "scale"}, {"squared"});
  b.output_any("attended", 1).output_any("linear", 1).output_any("gemm", 1);
  b.output_any("normalized", 1).output_any("scaled", 1).output_any("squared", 1);
  const std::string bytes = b.bytes();
  Session varying = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
  for (int64_t length : {5, 17, 64, 1, 33, 17}) {
    NamedValues feeds;
    for (const char* name : {"q", "k", "v"}) {
      Tensor t = Tensor::empty(DType::Float, {1, 4, length, 16});
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
      feeds.emplace_back(name, t);
    }
    Tensor x = Tensor::empty(DType::Float, {length, 32});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
    feeds.emplace_back("x", x);
    Tensor wide = Tensor::empty(DType::Float, {length, 128});
    for (int64_t i = 0; i < wide.numel(); ++i) wide.data<float>()[i] = u(rng);
    feeds.emplace_back("wide", wide);
    Session fresh = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
    const auto wanted = fresh.run(feeds);
    RunProfile profile;
    const auto got = varying.run(feeds, {}, {.profile = &profile});
    for (const ProfileEvent& e : profile.events) {
      EXPECT_EQ(e.reference, "") << e.node << " at length " << length;
      // oneDNN's binary primitives are code generated per shape (KernelDef::shape_specific):
      // from the second length on, volt's loop takes the wide Add and Muls.
      if (length != 5 && (e.op == "Add" || e.op == "Mul")) {
        EXPECT_EQ(e.kernel.rfind("dnnl", 0), std::string::npos) << e.node << " at " << length;
      }
    }
    ASSERT_EQ(got.size(), wanted.size());
    for (size_t o = 0; o < got.size(); ++o) {
      const Tensor& g = got[o].tensor();
      const Tensor& w = wanted[o].tensor();
      ASSERT_EQ(g.shape(), w.shape()) << "output " << o << " at length " << length;
      for (int64_t i = 0; i < g.numel(); ++i)
        ASSERT_NEAR(g.data<float>()[i], w.data<float>()[i], 1e-5f)
            << "output " << o << " at length " << length;
    }
  }
  EXPECT_EQ(varying.cached_plans(), 5u);
}

// In a plan for several shapes, a node whose inputs keep the types they had in the session's
// first plan is planned as for one shape (PlanInputs::first_types): here the Add of a token
// stays on oneDNN's binary primitive (made per shape, so not in plans for several shapes) at
// every past length, while the Add over
// the past moves to volt's shape-generic loop from the second length on.
TEST(GraphRunner, NodesWhoseShapesNeverVaryKeepTheirOneShapeKernels) {
  std::mt19937 rng(29);
  ModelBuilder b;
  b.input("token", 1, {1, 4096}).input("past", 1, {-1, 1024});
  const std::vector<float> bias = uniform_values(rng, 4096);
  b.initializer("bias", {4096}, bias);
  b.node("Add", {"token", "bias"}, {"moved"}, {}, "token_add");
  b.node("Add", {"past", "past"}, {"doubled"}, {}, "past_add");
  b.output_any("moved", 1).output_any("doubled", 1);
  const std::string bytes = b.bytes();
  Session s = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
  const Tensor token = Tensor::from<float>(uniform_values(rng, 4096), {1, 4096});
  for (int64_t length : {5, 9, 30}) {
    const Tensor past = Tensor::from<float>(uniform_values(rng, static_cast<size_t>(length * 1024)),
                                            {length, 1024});
    RunProfile profile;
    const auto got = s.run({{"token", token}, {"past", past}}, {}, {.profile = &profile});
    for (const ProfileEvent& e : profile.events) {
      const bool dnnl = e.kernel.rfind("dnnl", 0) == 0;
      EXPECT_EQ(dnnl, e.node == "token_add" || length == 5) << e.node << " at length " << length;
    }
    for (int64_t i = 0; i < 4096; ++i)
      ASSERT_FLOAT_EQ(got[0].tensor().data<float>()[i],
                      token.data<float>()[i] + bias[static_cast<size_t>(i)]);
    for (int64_t i = 0; i < past.numel(); ++i)
      ASSERT_FLOAT_EQ(got[1].tensor().data<float>()[i], 2 * past.data<float>()[i]);
  }
}
}  // namespace
}  // namespace volt

namespace volt {
namespace {

// A shape-generic plan takes, from the one built before it, the steps of nodes whose inputs
// keep their types and constant values (PlanInputs::previous), and the values of nodes it folded
// from such inputs: here a token's projection ([1, 16] x W) and its shape, whatever the length
// of the past it attends over, while the scores over the past are planned again. Every length
// computes what a fresh session computes.
TEST(GraphRunner, GenericPlansTakeTheStepsWhoseInputsKeepTheirTypes) {
  std::mt19937 rng(23);
  ModelBuilder b;
  // (The token's width left open, so that its shape is a formula of the plan's, not a constant of
  // the session's: fold_shape_arithmetic.)
  b.input("token", 1, {1, -1}).input("past", 1, {-1, 16});
  b.initializer("W", {16, 16}, uniform_values(rng, 256));
  b.node("MatMul", {"token", "W"}, {"query"});
  b.node("Transpose", {"past"}, {"keys"}, [](auto& n) {
    ModelBuilder::set_ints(n, "perm", {1, 0});
  });
  b.node("MatMul", {"query", "keys"}, {"scores"});
  b.node("Softmax", {"scores"}, {"weights"});
  b.node("Shape", {"token"}, {"token_shape"});
  b.node("Reshape", {"query", "token_shape"}, {"query_again"});
  b.output_any("query", 1).output_any("weights", 1).output_any("query_again", 1);
  const std::string bytes = b.bytes();
  Model m = load_model_from_bytes(bytes.data(), bytes.size());
  auto graph = std::make_shared<Graph>(run_passes(m.graph, SessionOptions{}));
  auto runner = GraphRunner::owning(graph, "test", "cpu", 1, 8);
  Session reference = Session::from_bytes(bytes.data(), bytes.size(), {.optimization_level = 0});
  const Tensor token = Tensor::from<float>(uniform_values(rng, 16), {1, 16});
  std::vector<std::shared_ptr<const Plan>> plans;
  for (int64_t length : {5, 9, 30, 9}) {
    Tensor past = Tensor::empty(DType::Float, {length, 16});
    const std::vector<float> values = uniform_values(rng, static_cast<size_t>(past.numel()));
    std::copy(values.begin(), values.end(), past.data<float>());
    Value tv = token, pv = past;
    std::vector<const Value*> fed(runner->compiled().names.size(), nullptr);
    fed[runner->compiled().id("token")] = &tv;
    fed[runner->compiled().id("past")] = &pv;
    plans.push_back(runner->plan_for(fed));
    const auto got = runner->run(fed);
    const auto want = reference.run({{"token", token}, {"past", past}});
    for (size_t o = 0; o < want.size(); ++o)
      for (int64_t i = 0; i < want[o].tensor().numel(); ++i)
        ASSERT_NEAR(got[o].tensor().data<float>()[i], want[o].tensor().data<float>()[i], 1e-5f)
            << "length " << length << " output " << o;
  }
  // The step whose first input is `input`.
  auto step = [](const Plan& p, const std::string& input) -> const PlanStep& {
    for (const PlanStep& s : p.steps)
      if (p.graph->names[s.inputs[0]] == input) return s;
    ADD_FAILURE() << "no step reads " << input;
    return p.steps[0];
  };
  ASSERT_TRUE(plans[1]->shape_generic && plans[2]->shape_generic);
  EXPECT_EQ(step(*plans[2], "token").state, step(*plans[1], "token").state)
      << "the projection was planned again for a new past length";
  EXPECT_NE(step(*plans[2], "query").state, step(*plans[1], "query").state);
  // What folds from unchanged inputs (the token's shape) is taken as it was, not folded again.
  const int shape_id = runner->compiled().id("token_shape/formula");
  ASSERT_TRUE(plans[1]->constants[shape_id] && plans[2]->constants[shape_id]);
  EXPECT_EQ(plans[2]->constants[shape_id], plans[1]->constants[shape_id]);
}

}  // namespace
}  // namespace volt

namespace volt {
namespace {

// A step whose input shapes are known only at run time (here downstream of a Reshape to a shape
// fed as an input) chooses its kernel at the run; runs whose inputs have the types of the last
// one take that choice as it is: the Gemm's constant weights are packed once, not at every run.
// A new type makes a new choice; a choice that read a value of the run (an Expand's target
// shape) is never taken again, so each run's target shapes its output.
TEST(GraphRunner, DeferredStepsKeepTheirChoiceWhileTheirInputsKeepTheirTypes) {
  constexpr int64_t k = 64, n = 48;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> w(k * n);
  for (auto& e : w) e = u(rng);
  ModelBuilder b;
  b.input("x", 1, {-1}).input("shape", 7, {2}).output("y", 1, {-1, -1});
  b.initializer("W", {k, n}, w);
  b.node("Reshape", {"x", "shape"}, {"a"}).node("Gemm", {"a", "W"}, {"y"});
  const std::string bytes = b.bytes();
  Session s = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 1});
  auto run = [&](int64_t rows, int64_t cols) {
    std::vector<float> x(static_cast<size_t>(rows * cols));
    for (auto& e : x) e = u(rng);
    const Tensor y = s.run({{"x", Tensor::from(x, {rows * cols})},
                            {"shape", Tensor::from(std::vector<int64_t>{rows, cols}, {2})}})[0]
                         .tensor();
    EXPECT_EQ(y.shape(), (Shape{rows, n}));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j) {
        double want = 0;
        for (int64_t p = 0; p < k; ++p) want += double(x[r * cols + p]) * w[p * n + j];
        EXPECT_NEAR(y.data<float>()[r * n + j], want, 1e-4)
            << rows << " rows, at " << r << "," << j;
      }
  };
  run(3, k);
  const size_t packs = dnnl_adapter::packed_weights().packs();
  for (int i = 0; i < 4; ++i) run(3, k);
  EXPECT_EQ(dnnl_adapter::packed_weights().packs(), packs)
      << "the deferred Gemm prepared its weights again for inputs of the same type";
  run(5, k);  // a new type: a new choice, right for it
  run(3, k);
  run(5, k);
  // The same x type as the last run, another target: the Reshape's choice read the run's value, so
  // it is remade. (x of 5 * 64 elements as [5, 64] and as [320]: the Gemm then refuses the rank,
  // which says the Reshape was not taken from the run before.)
  std::vector<float> x(5 * k, 0.5f);
  EXPECT_THROW(s.run({{"x", Tensor::from(x, {5 * k})},
                      {"shape", Tensor::from(std::vector<int64_t>{1, 5 * k}, {2})}}),
               Error);
  // An Expand to a shape fed at run time: the same input types, other target values, each run's
  // own output shape.
  ModelBuilder e;
  e.input("to", 7, {2}).output("z", 1, {-1, -1}).initializer("one", {1}, {2.5f});
  e.node("Expand", {"one", "to"}, {"z"});
  const std::string expand_bytes = e.bytes();
  Session expand = Session::from_bytes(expand_bytes.data(), expand_bytes.size(), {.threads = 1});
  for (const auto& to : {Shape{2, 3}, Shape{2, 3}, Shape{3, 2}, Shape{1, 7}}) {
    const Tensor z = expand.run({{"to", Tensor::from(std::vector<int64_t>(to), {2})}})[0].tensor();
    EXPECT_EQ(z.shape(), to);
    for (int64_t i = 0; i < z.numel(); ++i) EXPECT_EQ(z.data<float>()[i], 2.5f);
  }
}

}  // namespace
}  // namespace volt

namespace volt {
namespace {

// A shape-generic plan takes the initializers' values from the plan before it by id
// (PlanInputs::initializers_as_in_previous), except those the caller fed there: an initializer
// that is also a graph input, overridden at one length and not at the next, is the graph's own
// again at the next.
TEST(GraphRunner, AnInitializerFedAtOneLengthIsTheGraphsOwnAtTheNext) {
  ModelBuilder b;
  b.input("x", 1, {-1, 4}).input("scale", 1, {4}).output_any("y", 1);
  b.initializer("scale", {4}, {1.0f, 2.0f, 3.0f, 4.0f});
  b.node("Mul", {"x", "scale"}, {"y"});
  const std::string bytes = b.bytes();
  Session s = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 1});
  const Tensor fed_scale = Tensor::from<float>({-1.0f, -1.0f, -1.0f, -1.0f}, {4});
  // (Lengths 1, 2, 3, 4: each a new shape, the second on a plan for several shapes.)
  for (int64_t rows = 1; rows <= 4; ++rows) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    Tensor x = Tensor::empty(DType::Float, {rows, 4});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 1.0f;
    const bool override_scale = rows == 3;
    std::vector<std::pair<std::string, Value>> feeds = {{"x", x}};
    if (override_scale) feeds.emplace_back("scale", fed_scale);
    const Tensor y = s.run(feeds)[0].tensor();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < 4; ++c)
        ASSERT_EQ(y.data<float>()[r * 4 + c], override_scale ? -1.0f : float(c + 1))
            << "row " << r << " column " << c;
  }
}

// Plans for new input shapes take heap pages faulted in once, after the session's first plan for
// a second shape (warm_heap_for_plans), rather than faulting their own: planning a dozen more
// lengths of a 60-node chain faults next to nothing. (Lengths that shrink, so that the runs' arena
// and outputs fit the buffers of the first; the runs themselves fault nothing then.)
TEST(GraphRunner, PlansForNewShapesFindTheirHeapPagesResident) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "under AddressSanitizer glibc's malloc is not the one serving the plans";
#else
  if (std::getenv("GLIBC_TUNABLES") || std::getenv("VOLT_SYSTEM_MALLOC"))
    GTEST_SKIP() << "malloc tunables set: volt leaves the heap as the process set it";
  ModelBuilder b;
  std::mt19937 rng(41);
  b.input("x", 1, {-1, 16}).output_any("y", 1);
  std::string v = "x";
  for (int i = 0; i < 30; ++i) {
    const std::string w = "w" + std::to_string(i), bias = "b" + std::to_string(i);
    b.initializer(w, {16, 16}, uniform_values(rng, 256));
    b.initializer(bias, {16}, uniform_values(rng, 16));
    const std::string out = i == 29 ? "y" : "h" + std::to_string(i);
    b.node("MatMul", {v, w}, {out + "_p"}).node("Tanh", {out + "_p"}, {out + "_t"});
    b.node("Add", {out + "_t", bias}, {out});
    v = out;
  }
  const std::string bytes = b.bytes();
  Session s = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 1});
  auto run_at = [&](int64_t rows) {
    Tensor x = Tensor::empty(DType::Float, {rows, 16});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.01f * float(i % 7);
    return s.run({{"x", x}});
  };
  run_at(400);
  run_at(399);  // the first plan for a second shape: the heap is warmed here
  auto faults = [] {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
  };
  const long before = faults();
  for (int64_t rows = 398; rows > 386; --rows) run_at(rows);
  // Without the warming: 246 faults (about 20 a plan); with it, none here.
  EXPECT_LE(faults() - before, 12) << "12 plans for new lengths";
#endif
}

}  // namespace
}  // namespace volt
