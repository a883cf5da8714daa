// Weights wherever the exporter put them (Constant nodes, If branches, captured by branches),
// and never a silent zero gradient: what cannot be trained is refused at creation, by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "loaders/loader.hpp"
#include "model_builder.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

namespace fs = std::filesystem;
using testing::ModelBuilder;

std::string temp(const std::string& name) {
  return (fs::temp_directory_path() / ("volt_weights_" + std::to_string(getpid()) + "_" + name))
      .string();
}

const Tensor kX = Tensor::from<float>({1, 2, 3, -1, 0.5f, 2}, {2, 3});
const Tensor kT = Tensor::from<float>({0.5f, 1, -1, 2, 0, 1}, {2, 3});

float max_abs_diff(const Tensor& a, const Tensor& b) {
  float m = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, std::abs(a.data<float>()[i] - b.data<float>()[i]));
  return m;
}

// y = x W + b with W and b held by Constant nodes (as some exporters write weights).
TEST(WeightsAnywhere, ConstantNodesAreTrainedAndExportedBackIntoTheirNodes) {
  ModelBuilder b;
  b.input("x", 1, {2, 3}).output("y", 1, {2, 2});
  b.node("Constant", {}, {"W"}, [](onnx::NodeProto& n) {
    ModelBuilder::set_float_tensor(n, "value", {3, 2}, {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f});
  });
  b.node("Constant", {}, {"bias"}, [](onnx::NodeProto& n) {
    ModelBuilder::set_float_tensor(n, "value", {2}, {0.05f, -0.05f});
  });
  b.node("MatMul", {"x", "W"}, {"xw"}).node("Add", {"xw", "bias"}, {"y"});
  const std::string path = temp("constants.onnx");
  b.save(path);
  Trainer tr(path, {{"loss", "mse"}, {"optimizer", "adam"}, {"learning_rate", "0.01"}});
  EXPECT_EQ(tr.trainable(), (std::vector<std::string>{"W", "bias"}));
  const Tensor label = Tensor::from<float>({1, 0, -1, 2}, {2, 2});
  const float first = tr.step({{"x", kX}, {"label", label}});
  float last = first;
  for (int i = 0; i < 9; ++i) last = tr.step({{"x", kX}, {"label", label}});
  EXPECT_LT(last, first);

  const std::string out = temp("constants_tuned.onnx");
  tr.export_model(out);
  const Model exported = load_model(out);
  EXPECT_TRUE(exported.graph.initializers.empty()) << "the weights stay in their Constant nodes";
  int constants = 0;
  for (const Node& n : exported.graph.nodes) constants += n.op_type == "Constant";
  EXPECT_EQ(constants, 2);
  const Tensor a = Session(out).run({{"x", kX}})[0].tensor();
  const Tensor p = tr.predict({{"x", kX}})[0].tensor();
  EXPECT_EQ(std::memcmp(a.raw(), p.raw(), a.nbytes()), 0);
  EXPECT_GT(max_abs_diff(a, Session(path).run({{"x", kX}})[0].tensor()), 1e-4f);
  fs::remove(path);
  fs::remove(out);
}

// A model whose weights only the branches of an If read: W, an initializer of the main graph
// that both branches capture, and V, an initializer of the then-branch itself.
// then: y = x * W * V; else: y = x + W.
std::string if_model() {
  ModelBuilder then_b, else_b;
  then_b.output_any("then_y", 1)
      .initializer("V", {3}, {1.0f, 1.5f, 0.5f})
      .node("Mul", {"x", "W"}, {"xw"})
      .node("Mul", {"xw", "V"}, {"then_y"});
  else_b.output_any("else_y", 1).node("Add", {"x", "W"}, {"else_y"});
  ModelBuilder b;
  b.input("x", 1, {2, 3}).input("flag", 9, {}).output("y", 1, {2, 3});
  b.initializer("W", {3}, {0.5f, -1.0f, 2.0f});
  b.node(
      "If", {"flag"}, {"y"},
      [&](onnx::NodeProto& n) {
        ModelBuilder::set_graph(n, "then_branch", then_b);
        ModelBuilder::set_graph(n, "else_branch", else_b);
      },
      "branch");
  const std::string path = temp("if.onnx");
  b.save(path);
  return path;
}

// One SGD step: W' = W - lr dL/dW with L = mean((y - t)^2), the gradient of the branch taken.
TEST(WeightsAnywhere, WeightsReadOnlyInsideIfBranchesGetTheTakenBranchsGradient) {
  const std::string path = if_model();
  const float w[3] = {0.5f, -1.0f, 2.0f}, v[3] = {1.0f, 1.5f, 0.5f}, lr = 0.1f;
  for (bool flag : {true, false}) {
    SCOPED_TRACE(flag ? "then" : "else");
    Trainer tr(path, {{"loss", "mse"}, {"optimizer", "sgd"}, {"learning_rate", "0.1"}});
    EXPECT_EQ(tr.trainable(), (std::vector<std::string>{"V", "W"}));
    tr.step({{"x", kX}, {"flag", Tensor::scalar(flag)}, {"label", kT}});
    for (int j = 0; j < 3; ++j) {
      double gw = 0, gv = 0;
      for (int i = 0; i < 2; ++i) {
        const double x = kX.data<float>()[i * 3 + j], t = kT.data<float>()[i * 3 + j];
        const double y = flag ? x * w[j] * v[j] : x + w[j];
        const double dy = 2 * (y - t) / 6;
        gw += flag ? dy * x * v[j] : dy;
        gv += flag ? dy * x * w[j] : 0;
      }
      EXPECT_NEAR(tr.weight("W").data<float>()[j], w[j] - lr * gw, 1e-5) << "W[" << j << "]";
      EXPECT_NEAR(tr.weight("V").data<float>()[j], v[j] - lr * gv, 1e-5) << "V[" << j << "]";
    }
  }
  // The then-branch's own weight goes back into the branch.
  Trainer tr(path, {{"loss", "mse"}, {"learning_rate", "0.05"}});
  for (int i = 0; i < 5; ++i) tr.step({{"x", kX}, {"flag", Tensor::scalar(true)}, {"label", kT}});
  const std::string out = temp("if_tuned.onnx");
  tr.export_model(out);
  const Model exported = load_model(out);
  EXPECT_FALSE(exported.graph.initializers.count("V"));
  ASSERT_EQ(exported.graph.nodes.size(), 1u);
  EXPECT_TRUE(exported.graph.nodes[0].attr_graph("then_branch")->initializers.count("V"));
  const NamedValues feeds{{"x", kX}, {"flag", Tensor::scalar(true)}};
  const Tensor a = Session(out).run(feeds)[0].tensor(), p = tr.predict(feeds)[0].tensor();
  EXPECT_EQ(std::memcmp(a.raw(), p.raw(), a.nbytes()), 0);
  fs::remove(path);
  fs::remove(out);
}

// A weight a Loop body captures gets the gradient summed over the iterations.
TEST(WeightsAnywhere, AWeightCapturedByALoopTrains) {
  ModelBuilder body;
  body.input("i", 7, {}).input("cond_in", 9, {}).input("acc", 1, {2, 3});
  body.output_any("cond_out", 9).output_any("acc_out", 1);
  body.node("Identity", {"cond_in"}, {"cond_out"}).node("Mul", {"acc", "W"}, {"acc_out"});
  ModelBuilder b;
  b.input("x", 1, {2, 3}).output("y", 1, {2, 3});
  b.initializer("W", {3}, {0.5f, -1.0f, 2.0f}).initializer_i64("trips", {}, {2});
  b.node(
      "Loop", {"trips", "", "x"}, {"y"},
      [&](onnx::NodeProto& n) { ModelBuilder::set_graph(n, "body", body); }, "repeat");
  const std::string path = temp("loop.onnx");
  b.save(path);
  // y = x W^2: one SGD step moves W by lr * dL/dW, dL/dW = sum_i 2 (y - t) / 6 * 2 x W.
  Trainer tr(path, {{"loss", "mse"}, {"optimizer", "sgd"}, {"learning_rate", "0.1"}});
  EXPECT_EQ(tr.trainable(), (std::vector<std::string>{"W"}));
  tr.step({{"x", kX}, {"label", kT}});
  const float w[3] = {0.5f, -1.0f, 2.0f};
  for (int j = 0; j < 3; ++j) {
    double g = 0;
    for (int i = 0; i < 2; ++i) {
      const double x = kX.data<float>()[i * 3 + j], t = kT.data<float>()[i * 3 + j];
      g += 2 * (x * w[j] * w[j] - t) / 6 * 2 * x * w[j];
    }
    EXPECT_NEAR(tr.weight("W").data<float>()[j], w[j] - 0.1 * g, 1e-5) << j;
  }
  fs::remove(path);
}

// A weight a Scan body captures: y_t = sum over u <= t of x_u W, one SGD step exact.
TEST(WeightsAnywhere, AWeightCapturedByAScanTrains) {
  ModelBuilder body;
  body.input("s", 1, {3}).input("x_t", 1, {3});
  body.output_any("s_out", 1).output_any("y_t", 1);
  body.node("Mul", {"x_t", "W"}, {"xw"}).node("Add", {"s", "xw"}, {"s_out"});
  body.node("Identity", {"s_out"}, {"y_t"});
  ModelBuilder b(11);
  b.input("x", 1, {2, 3}).output("y", 1, {2, 3});
  b.initializer("W", {3}, {0.5f, -1.0f, 2.0f}).initializer("s0", {3}, {0, 0, 0});
  b.node(
      "Scan", {"s0", "x"}, {"s_final", "y"},
      [&](onnx::NodeProto& n) {
        ModelBuilder::set_graph(n, "body", body);
        ModelBuilder::set_int(n, "num_scan_inputs", 1);
      },
      "accumulate");
  const std::string path = temp("scan.onnx");
  b.save(path);
  Trainer tr(path,
             {{"loss", "mse"}, {"optimizer", "sgd"}, {"learning_rate", "0.1"}, {"trainable", "W"}});
  tr.step({{"x", kX}, {"label", kT}});
  const float w[3] = {0.5f, -1.0f, 2.0f};
  for (int j = 0; j < 3; ++j) {
    double g = 0, prefix = 0;
    for (int t = 0; t < 2; ++t) {
      prefix += kX.data<float>()[t * 3 + j];
      g += 2 * (prefix * w[j] - kT.data<float>()[t * 3 + j]) / 6 * prefix;
    }
    EXPECT_NEAR(tr.weight("W").data<float>()[j], w[j] - 0.1 * g, 1e-5) << j;
  }
  fs::remove(path);
}

// y = op(x * W), saved to a temporary file.
std::string mul_then(const std::string& op, const std::string& node_name, int opset = 13) {
  ModelBuilder b(opset);
  b.input("x", 1, {2, 3}).output("y", 1, {2, 3}).initializer("W", {3}, {1, 2, 3});
  b.node("Mul", {"x", "W"}, {"m"}).node(op, {"m"}, {"y"}, {}, node_name);
  const std::string path = temp(op + ".onnx");
  b.save(path);
  return path;
}

TEST(WeightsAnywhere, AnOpWithoutAGradientRuleIsNamedAtCreation) {
  // DFT has no rule (ONNX marks none of its inputs differentiable).
  const std::string path = mul_then("DFT", "spectrum", 17);
  EXPECT_VOLT_ERROR(Trainer(path, {{"loss", "mse"}}), NotImplemented, "spectrum", "DFT",
                    "no gradient rule");
  fs::remove(path);
}

// Floor's derivative is zero almost everywhere: a weight seen only through it cannot learn. By
// default it is not trained; asked for by name, it is an error that names the node.
TEST(WeightsAnywhere, AWeightSeenOnlyThroughAZeroDerivativeIsRefusedByName) {
  const std::string path = mul_then("Floor", "round_down");
  EXPECT_VOLT_ERROR(Trainer(path, {{"loss", "mse"}}), InvalidArgument, "nothing to train");
  EXPECT_VOLT_ERROR(Trainer(path, {{"loss", "mse"}, {"trainable", "W"}}), InvalidArgument, "'W'",
                    "only through inputs that carry no gradient", "round_down");
  fs::remove(path);
}

TEST(WeightsAnywhere, AQuantizedModelIsRefusedWithAPointerToTheFloatModel) {
  ModelBuilder b;
  b.input("x", 1, {2, 3}).output("y", 1, {2, 3});
  b.initializer("s", {}, {0.1f}).initializer("W", {3}, {1, 2, 3});
  b.node("QuantizeLinear", {"x", "s"}, {"q"}, {}, "quantize")
      .node("DequantizeLinear", {"q", "s"}, {"d"})
      .node("Mul", {"d", "W"}, {"y"});
  const std::string path = temp("quantized.onnx");
  b.save(path);
  EXPECT_VOLT_ERROR(Trainer(path, {{"loss", "mse"}}), InvalidArgument, "quantize",
                    "fine-tune the float model");
  fs::remove(path);
}

// Default parameters are float constants with more than one element that a gradient reaches:
// not Resize's scales, not BatchNormalization's running statistics, not scalars.
TEST(WeightsAnywhere, ScalesStatisticsAndScalarsAreNotParametersByDefault) {
  ModelBuilder b;
  b.input("x", 1, {1, 2, 2, 2}).output("y", 1, {1, 2, 4, 4});
  b.initializer("gamma", {2}, {1, 1})
      .initializer("beta", {2}, {0, 0})
      .initializer("mean", {2}, {0, 0})
      .initializer("var", {2}, {1, 1})
      .initializer("half", {}, {0.5f})
      .initializer("scales", {4}, {1, 1, 2, 2})
      .initializer("roi", {0}, {});
  b.node("BatchNormalization", {"x", "gamma", "beta", "mean", "var"}, {"bn"})
      .node("Mul", {"bn", "half"}, {"m"})
      .node("Resize", {"m", "roi", "scales"}, {"y"});
  const std::string path = temp("defaults.onnx");
  b.save(path);
  Trainer tr(path, {{"loss", "mse"}});
  EXPECT_EQ(tr.trainable(), (std::vector<std::string>{"beta", "gamma"}));
  EXPECT_VOLT_ERROR(Trainer(path, {{"loss", "mse"}, {"trainable", "scales"}}), InvalidArgument,
                    "'scales'", "carry no gradient");
  Trainer scalar(path, {{"loss", "mse"}, {"trainable", "half"}});  // asked for by name: trained
  EXPECT_EQ(scalar.trainable(), (std::vector<std::string>{"half"}));
  fs::remove(path);
}

// fp16 weights (models stored in half precision) train through fp32 masters with fp32 Adam
// state. In fp16 each of these updates (1e-4 against an ulp of 1e-3 at 1.0) would be lost, and
// the gradients' squares (about 1e-12) would underflow Adam's v to zero, making each step
// m / epsilon, far larger than the rate. The export holds them in fp16 again.
TEST(WeightsAnywhere, Float16WeightsLearnThroughAnFp32Master) {
  ModelBuilder b;
  b.input("x", 10, {1, 3}).output("y", 10, {1, 3});
  auto* w = b.proto().mutable_graph()->add_initializer();
  w->set_name("W");
  w->set_data_type(onnx::TensorProto::FLOAT16);
  w->add_dims(3);
  const uint16_t one = 0x3c00;  // 1.0 in fp16
  for (int i = 0; i < 3; ++i) w->mutable_raw_data()->append(reinterpret_cast<const char*>(&one), 2);
  b.node("Mul", {"x", "W"}, {"y"});
  const std::string path = temp("fp16_weights.onnx");
  b.save(path);
  Trainer tr(path, {{"loss", "mse"}, {"optimizer", "adam"}, {"learning_rate", "0.0001"}});
  const Tensor x = Tensor::from<Float16>({Float16(1e-3f), Float16(1e-3f), Float16(1e-3f)}, {1, 3});
  const Tensor t =
      Tensor::from<Float16>({Float16(-1e-3f), Float16(-1e-3f), Float16(-1e-3f)}, {1, 3});
  for (int i = 0; i < 10; ++i) tr.step({{"x", x}, {"label", t}});
  // Ten steps of about the rate each: the master is near 0.999, the exported weight its nearest
  // fp16.
  ASSERT_EQ(tr.weight("W").dtype(), DType::Float);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(tr.weight("W").data<float>()[i], 0.999f, 2e-4f);
  }
  const std::string out = temp("fp16_tuned.onnx");
  tr.export_model(out);
  const Model exported = load_model(out);
  const Tensor& w16 = exported.graph.initializers.at("W");
  ASSERT_EQ(w16.dtype(), DType::Float16);
  for (int i = 0; i < 3; ++i) {
    const float v = static_cast<float>(w16.data<Float16>()[i]);
    EXPECT_GT(v, 0.9985f);
    EXPECT_LT(v, 0.9995f);
  }
  const NamedValues feed{{"x", x}};
  const Tensor a = Session(out).run(feed)[0].tensor(), p = tr.predict(feed)[0].tensor();
  ASSERT_EQ(a.dtype(), DType::Float16);
  for (int i = 0; i < 3; ++i)  // the trainer predicts from the fp32 master, the export from fp16
    EXPECT_NEAR(static_cast<float>(a.data<Float16>()[i]), static_cast<float>(p.data<Float16>()[i]),
                2e-6f);
  fs::remove(path);
  fs::remove(out);
}

}  // namespace
}  // namespace volt
