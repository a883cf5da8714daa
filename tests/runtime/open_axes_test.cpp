// New lengths of a decoder's past. The plan for open axes (GraphRunner, Plan::serves_open_axes):
// a graph fed shapes that differ in one axis runs them on one plan in which only the steps that
// depend on that axis choose their kernels at run time; a value that had one type at the two
// shapes it was derived from but has another at a third makes the run fall back to a plan of its
// own, with the right answer. And the weights a second length's plan rebuilds: only those its
// new steps read (PlanInputs::restore_weight).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "loaders/loader.hpp"
#include "model_builder.hpp"
#include "runtime/graph_runner.hpp"
#include "runtime/passes/passes.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;
using testing::uniform_tensor;
using testing::uniform_values;

constexpr int64_t kWidth = 32;

// A decoder step in miniature: a token's projections and a 12-layer MLP (shapes fixed), and per
// layer of two the attention of the token's query over that layer's past keys with the token's
// own appended (shapes that follow the past's length P), returning the mixed token [1, 32] and
// the present keys [2, P + 1, 32]. `clip`: the scores (and keys) are cut to their first 8, so
// that the cut scores have one shape for P >= 7 and others below.
std::string decoder_step(std::mt19937& rng, bool clip) {
  ModelBuilder b;
  b.input("token", 1, {1, kWidth}).input("past", 1, {2, -1, kWidth});
  auto weight = [&](const std::string& name) {
    b.initializer(name, {kWidth, kWidth}, uniform_values(rng, kWidth * kWidth));
  };
  std::string h = "token";
  for (int i = 0; i < 12; ++i) {
    const std::string w = "mlp_w" + std::to_string(i), out = "mlp" + std::to_string(i);
    weight(w);
    b.node("MatMul", {h, w}, {out + "_pre"});
    b.node("Tanh", {out + "_pre"}, {out});
    h = out;
  }
  weight("wq");
  weight("wk");
  b.node("MatMul", {"token", "wq"}, {"query"});
  b.node("MatMul", {"token", "wk"}, {"key"});
  b.initializer_i64("ends", {1}, {8}).initializer_i64("starts", {1}, {0});
  b.initializer_i64("axes", {1}, {1});
  std::vector<std::string> mixed, presents;
  for (int layer = 0; layer < 2; ++layer) {
    const std::string l = std::to_string(layer);
    b.initializer_i64("layer" + l, {}, {layer});
    b.node("Gather", {"past", "layer" + l}, {"past" + l});
    b.node("Concat", {"past" + l, "key"}, {"keys" + l},
           [](auto& n) { ModelBuilder::set_int(n, "axis", 0); });
    b.node("Transpose", {"keys" + l}, {"keys_t" + l}, [](auto& n) {
      ModelBuilder::set_ints(n, "perm", {1, 0});
    });
    b.node("MatMul", {"query", "keys_t" + l}, {"scores" + l});
    std::string scores = "scores" + l;
    std::string values = "keys" + l;
    if (clip) {
      b.node("Slice", {scores, "starts", "ends", "axes"}, {scores + "_cut"});
      b.node("Slice", {values, "starts", "ends", "starts"}, {values + "_cut"});
      scores += "_cut";
      values += "_cut";
    }
    b.node("Softmax", {scores}, {"weights" + l});
    b.node("MatMul", {"weights" + l, values}, {"attended" + l});
    weight("wo" + l);
    b.node("MatMul", {"attended" + l, "wo" + l}, {"mixed" + l});
    b.initializer_i64("at0_" + l, {1}, {0});
    b.node("Unsqueeze", {"keys" + l, "at0_" + l}, {"present" + l});
    mixed.push_back("mixed" + l);
    presents.push_back("present" + l);
  }
  b.node("Add", {mixed[0], mixed[1]}, {"both"});
  b.node("Add", {"both", h}, {"out"});
  b.node("Concat", presents, {"present"}, [](auto& n) { ModelBuilder::set_int(n, "axis", 0); });
  b.output_any("out", 1).output_any("present", 1);
  return b.bytes();
}

struct Runner {
  explicit Runner(const std::string& bytes, int threads = 2) {
    Model m = load_model_from_bytes(bytes.data(), bytes.size());
    auto graph = std::make_shared<Graph>(run_passes(m.graph, SessionOptions{}));
    runner = GraphRunner::owning(graph, "test", "cpu", threads, 64);
  }
  std::vector<Value> run(const Tensor& token, const Tensor& past) {
    Value tv = token, pv = past;
    std::vector<const Value*> fed(runner->compiled().names.size(), nullptr);
    fed[runner->compiled().id("token")] = &tv;
    fed[runner->compiled().id("past")] = &pv;
    return runner->run(fed);
  }
  std::unique_ptr<GraphRunner> runner;
};

// Within 1e-4 relative to max(1, |want|): the optimized graph's products fused with their
// activations, and the kernels a plan for varying shapes chooses, sum in another order than the
// unoptimized graph's, through twelve layers (differences of 1e-5 seen); a wrong shape, row or
// layer is off by the values' own size.
bool close(float got, float want) {
  return std::abs(got - want) <= 1e-4f * std::max(1.0f, std::abs(want));
}

// Each output close to a session with no optimization that sees this shape alone.
void expect_as_alone(const std::string& bytes, const std::vector<Value>& got, const Tensor& token,
                     const Tensor& past) {
  Session alone = Session::from_bytes(bytes.data(), bytes.size(), {.optimization_level = 0});
  const auto want = alone.run({{"token", token}, {"past", past}});
  ASSERT_EQ(got.size(), want.size());
  for (size_t o = 0; o < want.size(); ++o) {
    const Tensor &g = got[o].tensor(), &w = want[o].tensor();
    ASSERT_EQ(g.shape(), w.shape()) << "output " << o << " at past " << past.dim(1);
    for (int64_t i = 0; i < w.numel(); ++i)
      ASSERT_TRUE(close(g.data<float>()[i], w.data<float>()[i]))
          << g.data<float>()[i] << " vs " << w.data<float>()[i] << ": output " << o << " element "
          << i << " at past " << past.dim(1);
  }
}

// Past lengths 5 and 9 get plans of their own; from the third length on, every new length runs
// on the plan for open axes (the cache holds no plan for it), with the answer a session fed that
// length alone gives, the fed past untouched (its layers are views of it there), until a length
// recurs for the eighth time and gets its own plan.
TEST(OpenAxes, NewLengthsOfADecodersPastRunOnOnePlan) {
  std::mt19937 rng(41);
  const std::string bytes = decoder_step(rng, false);
  Runner r(bytes);
  const Tensor token = uniform_tensor(rng, {1, kWidth});
  for (int64_t length : {5, 9, 30, 31, 17, 64, 30, 1, 100}) {
    const Tensor past = uniform_tensor(rng, {2, length, kWidth});
    const Tensor before = past.clone();
    const auto got = r.run(token, past);
    expect_as_alone(bytes, got, token, past);
    for (int64_t i = 0; i < past.numel(); ++i)
      ASSERT_EQ(past.data<float>()[i], before.data<float>()[i]) << "the fed past was written";
  }
  EXPECT_EQ(r.runner->cached_plans(), 2u) << "a new length built a plan of its own";
  const Tensor past = uniform_tensor(rng, {2, 23, kWidth});
  for (int run = 1; run <= 8; ++run) {
    const auto got = r.run(token, past);
    EXPECT_EQ(r.runner->cached_plans(), run < 8 ? 2u : 3u) << "run " << run;
    expect_as_alone(bytes, got, token, past);
  }
}

// With the scores cut to their first 8 columns, the cut scores are [1, 8] at pasts of 7 and
// more: the plan for open axes built from pasts of 9 and 12 takes that as their type whatever the
// length, and a past of 3, where the cut leaves 4 columns, is not what it planned. The run falls
// back to a plan of its own, with the right answer, and so does every length after it.
TEST(OpenAxes, AShapeThePlanDidNotForeseeFallsBackToAPlanOfItsOwn) {
  std::mt19937 rng(43);
  const std::string bytes = decoder_step(rng, true);
  Runner r(bytes);
  const Tensor token = uniform_tensor(rng, {1, kWidth});
  for (int64_t length : {9, 12, 20, 3, 40, 2}) {
    const Tensor past = uniform_tensor(rng, {2, length, kWidth});
    expect_as_alone(bytes, r.run(token, past), token, past);
  }
  // Pasts of 9 and 12 planned alone; 20 on the plan for open axes; 3 fell back (and dropped it):
  // 3, 40 and 2 on plans of their own.
  EXPECT_EQ(r.runner->cached_plans(), 5u);
}

// Threads running lengths at once on the plan for open axes (each of its run-time choices is
// kept for the next run at the same types, one at a time) all get a fresh session's answers.
TEST(OpenAxes, ThreadsRunNewLengthsAtOnce) {
  std::mt19937 rng(47);
  const std::string bytes = decoder_step(rng, false);
  Runner r(bytes);
  const Tensor token = uniform_tensor(rng, {1, kWidth});
  for (int64_t length : {5, 9}) r.run(token, uniform_tensor(rng, {2, length, kWidth}));
  const std::vector<int64_t> lengths = {3, 17, 30, 31, 64, 2, 45, 100, 12, 7};
  std::vector<Tensor> pasts;
  std::vector<std::vector<Value>> want;
  for (int64_t length : lengths) {
    pasts.push_back(uniform_tensor(rng, {2, length, kWidth}));
    // (A session of its own for each length: one fed several would run them as r does.)
    Session alone = Session::from_bytes(bytes.data(), bytes.size(), {.optimization_level = 0});
    want.push_back(alone.run({{"token", token}, {"past", pasts.back()}}));
  }
  std::vector<int> wrong(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 30; ++i) {
        const size_t k = static_cast<size_t>(t * 7 + i * 3) % lengths.size();
        const auto got = r.run(token, pasts[k]);
        for (size_t o = 0; o < got.size(); ++o) {
          const Tensor &g = got[o].tensor(), &w = want[k][o].tensor();
          if (g.shape() != w.shape()) {
            ++wrong[t];
            continue;
          }
          for (int64_t e = 0; e < w.numel(); ++e)
            if (!close(g.data<float>()[e], w.data<float>()[e])) {
              ++wrong[t];
              break;
            }
        }
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
}

// The session's first plan drops the weights its kernels keep packed copies of (Plan::released).
// A plan for a second length builds on it: the token's product keeps its step and its copy,
// and only the weight of the product over the past, planned afresh, comes back into the graph.
// Every length computes what an unoptimized session computes.
TEST(OpenAxes, ASecondLengthRebuildsOnlyTheWeightsItsNewStepsRead) {
  std::mt19937 rng(53);
  ModelBuilder b;
  b.input("token", 1, {1, 16}).input("past", 1, {-1, 16});
  b.initializer("Wa", {4, 16}, uniform_values(rng, 64));
  b.initializer("Wb", {4, 16}, uniform_values(rng, 64));
  // (Gemm's B transposed: its primitive always keeps a copy of its own.)
  b.node("Gemm", {"token", "Wa"}, {"a"}, [](auto& n) { ModelBuilder::set_int(n, "transB", 1); });
  b.node("Gemm", {"past", "Wb"}, {"b"}, [](auto& n) { ModelBuilder::set_int(n, "transB", 1); });
  b.output_any("a", 1).output_any("b", 1);
  const std::string bytes = b.bytes();
  Model m = load_model_from_bytes(bytes.data(), bytes.size());
  auto graph = std::make_shared<Graph>(run_passes(m.graph, SessionOptions{}));
  auto runner = GraphRunner::owning(graph, "test", "cpu", 1, 8);
  const Tensor token = uniform_tensor(rng, {1, 16});
  for (int64_t length : {5, 9, 30, 2}) {
    const Tensor past = uniform_tensor(rng, {length, 16});
    Value tv = token, pv = past;
    std::vector<const Value*> fed(runner->compiled().names.size(), nullptr);
    fed[runner->compiled().id("token")] = &tv;
    fed[runner->compiled().id("past")] = &pv;
    if (length == 5) {
      std::set<std::string> released;
      for (const auto& [id, restore] : runner->plan_for(fed)->released)
        released.insert(runner->compiled().names[id]);
      ASSERT_EQ(released, (std::set<std::string>{"Wa", "Wb"}));
    }
    const auto got = runner->run(fed);
    Session alone = Session::from_bytes(bytes.data(), bytes.size(), {.optimization_level = 0});
    const auto want = alone.run({{"token", token}, {"past", past}});
    for (size_t o = 0; o < want.size(); ++o) {
      ASSERT_EQ(got[o].tensor().shape(), want[o].tensor().shape());
      for (int64_t i = 0; i < want[o].tensor().numel(); ++i)
        ASSERT_TRUE(close(got[o].tensor().data<float>()[i], want[o].tensor().data<float>()[i]))
            << "output " << o << " at length " << length;
    }
    EXPECT_EQ(graph->initializers.count("Wa"), 0u) << "Wa was rebuilt at length " << length;
    EXPECT_EQ(graph->initializers.count("Wb"), length == 5 ? 0u : 1u) << "length " << length;
  }
}

// In a plan for open axes a Reshape whose target's length follows the past (its kernel chosen
// at run time, with no type known for it at plan time) outputs a view of a value in the arena; the
// steps after it are planned as usual and must not take that value's slot while the view is read.
// x [1, 4096] is reshaped to rank min(P, 4) + 1 and back, then negated: the negation, were it
// placed in x's slot, would change what the view reads (out = x + relu(-x) = x, x being a Relu's).
TEST(OpenAxes, AViewChosenAtRunTimeKeepsItsInputsSlot) {
  std::mt19937 rng(59);
  ModelBuilder b;
  b.input("token", 1, {1, 16}).input("past", 1, {-1, 16});
  std::string h = "token";
  for (int i = 0; i < 12; ++i) {
    // (std::string{"w"}: GCC 12 warns, wrongly, of overlapping copies in "w" + std::string.)
    const std::string w = std::string{"w"} + std::to_string(i),
                      out = std::string{"h"} + std::to_string(i);
    b.initializer(w, {16, 16}, uniform_values(rng, 256));
    b.node("MatMul", {h, w}, {out + "_pre"});
    b.node("Tanh", {out + "_pre"}, {out});
    h = out;
  }
  // (x wide, the other values narrow: a free slot its negation fits in is x's alone.)
  b.initializer("wide", {16, 4096}, uniform_values(rng, 16 * 4096));
  b.node("MatMul", {h, "wide"}, {"x_pre"});
  b.node("Relu", {"x_pre"}, {"x"});
  b.initializer_i64("zero", {1}, {0}).initializer_i64("four", {1}, {4});
  b.initializer_i64("one", {1}, {1}).initializer_i64("five", {1}, {5});
  b.initializer_i64("big", {5}, {1, 1, 1, 1, 4096}).initializer_i64("flat", {2}, {1, 4096});
  b.node("Shape", {"past"}, {"past_shape"});
  b.node("Gather", {"past_shape", "zero"}, {"length"});
  b.node("Min", {"length", "four"}, {"capped"});
  b.node("Add", {"capped", "one"}, {"rank"});
  b.node("Sub", {"five", "rank"}, {"start"});
  b.node("Slice", {"big", "start", "five"}, {"target"});
  b.node("Reshape", {"x", "target"}, {"y"});
  b.node("Reshape", {"y", "flat"}, {"y2"});
  b.node("Neg", {"y2"}, {"negated"});
  b.node("Relu", {"negated"}, {"z"});
  b.node("Add", {"y2", "z"}, {"out"});
  b.output_any("out", 1);
  const std::string bytes = b.bytes();
  Runner r(bytes, 1);  // (one thread: the products' scratch then leaves x's slot the only fit)
  for (int64_t length : {2, 3, 5, 1, 7, 4}) {
    const Tensor token = uniform_tensor(rng, {1, 16});
    const Tensor past = uniform_tensor(rng, {length, 16});
    const auto got = r.run(token, past);
    // (A session of its own for each length: one fed several would run them as r does.)
    Session alone = Session::from_bytes(bytes.data(), bytes.size(), {.optimization_level = 0});
    const auto want = alone.run({{"token", token}, {"past", past}});
    for (int64_t i = 0; i < 4096; ++i)
      ASSERT_TRUE(close(got[0].tensor().data<float>()[i], want[0].tensor().data<float>()[i]))
          << got[0].tensor().data<float>()[i] << " vs " << want[0].tensor().data<float>()[i]
          << " at length " << length;
  }
}

}  // namespace
}  // namespace volt
