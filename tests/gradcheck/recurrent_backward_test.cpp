// RecurrentGrad on oneDNN's forward-training and backward primitives (fp32) against its float64
// loops, which gradcheck_test checks by finite differences. Every configuration the primitives
// take: the four cells, each direction, both layouts, with and without initial states and
// peepholes, gradients arriving at Y, Y_h and Y_c. The loss is
// sum(Y * wy) + sum(Y_h * wh) [+ sum(Y_c * wc)] with random wy, wh, wc, so every element of
// every output gradient differs.
// Tolerance: the fp32 path rounds each of about seq * (in + h) products per element; 1e-4
// relative to (1 + |reference|) is a hundred times the worst seen, and a wrong gate, layout or
// direction mapping gives errors of order 1.
#include <gtest/gtest.h>

#include <random>

#include "loaders/loader.hpp"
#include "model_builder.hpp"
#include "operators/op_runner.hpp"
#include "runtime/graph_runner.hpp"
#include "runtime/training/autodiff.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

struct Config {
  std::string cell;  // RNN, GRU, LSTM
  std::string direction;
  int64_t layout = 0;
  bool initial_states = true, peepholes = false, linear_before_reset = false;
  std::string activation;  // RNN only; empty: the default
  int64_t seq = 6, batch = 3, in = 5, hidden = 7;
};

std::string describe(const Config& c) {
  return c.cell + " " + std::to_string(c.hidden) + " " + c.direction + " layout " +
         std::to_string(c.layout) + (c.initial_states ? " initial states" : "") +
         (c.peepholes ? " peepholes" : "") + (c.linear_before_reset ? " linear_before_reset" : "") +
         " " + c.activation;
}

Tensor random(const Shape& s, unsigned seed, double scale = 0.6) {
  std::mt19937 rng(seed);
  return testing::random_double(s, rng, -scale, scale);
}

Tensor as_doubles(const Tensor& t) {
  Tensor d = Tensor::empty(DType::Double, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i)
    d.data<double>()[i] = t.dtype() == DType::Float ? t.data<float>()[i] : t.data<double>()[i];
  return d;
}

struct Result {
  std::vector<Tensor> grads;          // float64 copies
  std::vector<std::string> fallback;  // why RecurrentGrad ran its loops, if it did
};

Result gradients(const Config& c, DType dtype) {
  const int64_t seq = c.seq, batch = c.batch, in = c.in, h = c.hidden,
                dirs = c.direction == "bidirectional" ? 2 : 1;
  const int64_t gates = c.cell == "RNN" ? 1 : (c.cell == "GRU" ? 3 : 4);
  const bool lstm = c.cell == "LSTM";
  const Shape x = c.layout ? Shape{batch, seq, in} : Shape{seq, batch, in};
  const Shape state = c.layout ? Shape{batch, dirs, h} : Shape{dirs, batch, h};
  const Shape y = c.layout ? Shape{batch, seq, dirs, h} : Shape{seq, dirs, batch, h};
  std::vector<std::pair<std::string, Tensor>> values = {
      {"x", random(x, 1, 1.0)},
      {"w", random({dirs, gates * h, in}, 2)},
      {"r", random({dirs, gates * h, h}, 3)},
      {"b", random({dirs, 2 * gates * h}, 4, 0.5)}};
  std::vector<std::string> ins = {"x", "w", "r", "b", ""};
  if (c.initial_states) {
    values.emplace_back("h0", random(state, 5, 0.5));
    ins.push_back("h0");
  } else {
    ins.push_back("");
  }
  if (lstm) {
    if (c.initial_states) values.emplace_back("c0", random(state, 6, 0.5));
    ins.push_back(c.initial_states ? "c0" : "");
    if (c.peepholes) values.emplace_back("p", random({dirs, 3 * h}, 7, 0.5));
    ins.push_back(c.peepholes ? "p" : "");
  }
  while (!ins.empty() && ins.back().empty()) ins.pop_back();
  std::vector<std::string> wrt;
  for (const auto& [name, v] : values) wrt.push_back(name);
  values.emplace_back("wy", random(y, 8, 1.0));
  values.emplace_back("wh", random(state, 9, 1.0));
  if (lstm) values.emplace_back("wc", random(state, 10, 1.0));

  ModelBuilder b(14, 10);
  const int elem = dtype == DType::Float ? 1 : 11;
  for (const auto& [name, v] : values) b.input_any(name, elem);
  b.output_any("loss", elem);
  std::vector<std::string> outs = {"Y", "Y_h"};
  if (lstm) outs.push_back("Y_c");
  b.node(c.cell, ins, outs, [&](onnx::NodeProto& n) {
    ModelBuilder::set_int(n, "hidden_size", h);
    ModelBuilder::set_string(n, "direction", c.direction);
    ModelBuilder::set_int(n, "layout", c.layout);
    if (c.linear_before_reset) ModelBuilder::set_int(n, "linear_before_reset", 1);
    if (!c.activation.empty())
      ModelBuilder::set_strings(n, "activations",
                                std::vector<std::string>(static_cast<size_t>(dirs), c.activation));
  });
  b.node("Mul", {"Y", "wy"}, {"my"}).node("ReduceSum", {"my"}, {"sy"}, [](onnx::NodeProto& n) {
    ModelBuilder::set_int(n, "keepdims", 0);
  });
  b.node("Mul", {"Y_h", "wh"}, {"mh"}).node("ReduceSum", {"mh"}, {"sh"}, [](onnx::NodeProto& n) {
    ModelBuilder::set_int(n, "keepdims", 0);
  });
  if (lstm) {
    b.node("Mul", {"Y_c", "wc"}, {"mc"}).node("ReduceSum", {"mc"}, {"sc"}, [](onnx::NodeProto& n) {
      ModelBuilder::set_int(n, "keepdims", 0);
    });
    b.node("Sum", {"sy", "sh", "sc"}, {"loss"});
  } else {
    b.node("Add", {"sy", "sh"}, {"loss"});
  }
  const std::string bytes = b.bytes();
  Graph g = load_model_from_bytes(bytes.data(), bytes.size()).graph;
  const auto grads = append_gradients(g, {"loss", "", wrt}, "recurrent_backward");
  g.outputs.clear();
  for (const auto& n : grads) g.outputs.push_back(ValueInfo{n});

  GraphRunner runner(std::make_shared<const Graph>(g), "recurrent_backward", "cpu", 2);
  std::vector<Value> feeds;
  feeds.reserve(values.size());
  std::vector<const Value*> fed(runner.compiled().names.size(), nullptr);
  for (const auto& [name, v] : values) {
    feeds.emplace_back(testing::cast_to(v, dtype));
    fed[runner.compiled().id(name)] = &feeds.back();
  }
  Result r;
  for (const auto& step : runner.plan_for(fed)->steps)
    if (runner.compiled().graph->nodes[step.node].op_type == "RecurrentGrad" &&
        !step.reference.empty())
      r.fallback.push_back(step.reference);
  for (auto& v : runner.run(fed)) r.grads.push_back(as_doubles(v.tensor()));
  return r;
}

TEST(RecurrentBackward, OneDnnPrimitivesMatchTheFloat64Loops) {
  std::vector<Config> configs;
  for (const std::string dir : {"forward", "reverse", "bidirectional"})
    for (int64_t layout : {0, 1})
      for (bool states : {true, false}) {
        configs.push_back({"LSTM", dir, layout, states, false, false, ""});
        configs.push_back({"GRU", dir, layout, states, false, false, ""});
        configs.push_back({"RNN", dir, layout, states, false, false, ""});
      }
  configs.push_back({"LSTM", "bidirectional", 0, true, true, false, ""});
  configs.push_back({"LSTM", "reverse", 1, false, true, false, ""});
  configs.push_back({"GRU", "bidirectional", 0, true, false, true, ""});
  configs.push_back({"GRU", "forward", 1, false, false, true, ""});
  configs.push_back({"RNN", "bidirectional", 1, true, false, false, "Relu"});
  configs.push_back({"RNN", "forward", 0, true, false, false, "Sigmoid"});
  // Sizes where oneDNN blocks and parallelizes its products.
  for (const std::string cell : {"LSTM", "GRU"})
    for (const std::string dir : {"forward", "bidirectional"})
      configs.push_back({cell, dir, 1, false, false, false, "", 24, 8, 19, 40});
  for (const Config& c : configs) {
    SCOPED_TRACE(describe(c));
    const Result f32 = gradients(c, DType::Float), f64 = gradients(c, DType::Double);
    EXPECT_TRUE(f32.fallback.empty()) << f32.fallback[0];
    ASSERT_EQ(f32.grads.size(), f64.grads.size());
    for (size_t i = 0; i < f32.grads.size(); ++i) {
      ASSERT_EQ(f32.grads[i].shape(), f64.grads[i].shape()) << "gradient " << i;
      EXPECT_LT(testing::max_rel_diff(f32.grads[i], f64.grads[i]), 1e-4) << "gradient " << i;
    }
  }
}

}  // namespace
}  // namespace volt
