#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "model_builder.hpp"
#include "training/synthetic_data.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

namespace fs = std::filesystem;
using testing::accuracy;
using testing::Dataset;
using testing::ModelBuilder;
using testing::rows;
using testing::synthetic;
const std::string kMlp = std::string(VOLT_SOURCE_DIR) + "/models/mnist_mlp.onnx";

std::string temp(const std::string& name) {
  return (fs::temp_directory_path() / ("volt_trainer_" + std::to_string(getpid()) + "_" + name))
      .string();
}

TEST(Trainer, FineTunesTheBundledMlpToHighAccuracy) {
  const Dataset train = synthetic(2048, 1), held_out = synthetic(512, 2);
  Trainer tr(kMlp, {{"optimizer", "adam"}, {"learning_rate", "0.001"}, {"threads", "2"}});
  EXPECT_EQ(tr.trainable().size(), 6u);
  const double before = accuracy(tr, held_out);
  float first = 0, last = 0;
  for (int epoch = 0; epoch < 3; ++epoch)
    for (int64_t b = 0; b < 2048; b += 64) {
      last = tr.step({{"x", rows(train.x, b, 64)}, {"label", rows(train.y, b, 64)}});
      if (epoch == 0 && b == 0) first = last;
    }
  const double after = accuracy(tr, held_out);
  EXPECT_GE(after, 0.95) << "accuracy before " << before;
  EXPECT_LT(last, first * 0.5f);
  EXPECT_EQ(tr.steps(), 96);
  EXPECT_LT(tr.evaluate({{"x", held_out.x}, {"label", held_out.y}}), 0.3f);
}

TEST(Trainer, ResumingFromACheckpointContinuesBitForBit) {
  const Dataset d = synthetic(256, 3);
  const TrainOptions opts{{"optimizer", "sgd"},
                          {"momentum", "0.9"},
                          {"nesterov", "true"},
                          {"learning_rate", "0.01"},
                          {"threads", "1"}};
  auto batch = [&](int i) {
    return NamedValues{{"x", rows(d.x, (i % 8) * 32, 32)}, {"label", rows(d.y, (i % 8) * 32, 32)}};
  };
  Trainer straight(kMlp, opts);
  for (int i = 0; i < 10; ++i) straight.step(batch(i));

  Trainer first(kMlp, opts);
  for (int i = 0; i < 4; ++i) first.step(batch(i));
  const std::string ckpt = temp("resume.ckpt");
  first.save_checkpoint(ckpt);
  Trainer resumed(kMlp, opts);
  resumed.load_checkpoint(ckpt);
  EXPECT_EQ(resumed.steps(), 4);
  for (int i = 4; i < 10; ++i) resumed.step(batch(i));
  for (const auto& name : straight.trainable()) {
    const Tensor &a = straight.weight(name), &b = resumed.weight(name);
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << name;
  }
  fs::remove(ckpt);
}

TEST(Trainer, ExportedModelGivesTheTrainersEvaluationOutputs) {
  const Dataset d = synthetic(64, 4);
  Trainer tr(kMlp, {{"optimizer", "adamw"}, {"weight_decay", "0.01"}, {"learning_rate", "0.01"}});
  for (int i = 0; i < 3; ++i) tr.step({{"x", d.x}, {"label", d.y}});
  const std::string out = temp("tuned.onnx");
  tr.export_model(out);
  Session s(out);
  const Tensor a = s.run({{"x", d.x}})[0].tensor();
  const Tensor b = tr.predict({{"x", d.x}})[0].tensor();
  ASSERT_EQ(a.shape(), b.shape());
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
  // And it differs from the untuned model.
  const Tensor c = Session(kMlp).run({{"x", d.x}})[0].tensor();
  EXPECT_NE(std::memcmp(a.raw(), c.raw(), a.nbytes()), 0);
  fs::remove(out);
}

TEST(Trainer, OneSgdStepOnALinearModelIsExact) {
  // y = x W, loss = mean((y - t)^2): dL/dW = 2/n x^T (xW - t).
  ModelBuilder b;
  b.input("x", 1, {2, 3})
      .output("y", 1, {2, 1})
      .initializer("W", {3, 1}, {0.5f, -1.0f, 2.0f})
      .node("MatMul", {"x", "W"}, {"y"});
  const std::string path = temp("linear.onnx");
  b.save(path);
  Trainer tr(path, {{"loss", "mse"}, {"learning_rate", "0.1"}});
  const Tensor x = Tensor::from<float>({1, 2, 3, -1, 0, 1}, {2, 3});
  const Tensor t = Tensor::from<float>({1, 2}, {2, 1});
  tr.step({{"x", x}, {"label", t}});
  const float w[3] = {0.5f, -1.0f, 2.0f};
  const float y0 = 1 * w[0] + 2 * w[1] + 3 * w[2] - 1,
              y1 = -1 * w[0] + 0 * w[1] + 1 * w[2] - 2;  // residuals
  const float xs[2][3] = {{1, 2, 3}, {-1, 0, 1}};
  for (int j = 0; j < 3; ++j) {
    const float grad = (2.0f / 2) * (xs[0][j] * y0 + xs[1][j] * y1);
    EXPECT_NEAR(tr.weight("W").data<float>()[j], w[j] - 0.1f * grad, 1e-6f) << j;
  }
  fs::remove(path);
}

TEST(Trainer, TrainsTheBundledCnnWithBatchNormInTrainingMode) {
  const std::string cnn = std::string(VOLT_SOURCE_DIR) + "/models/small_cnn.onnx";
  // Two classes: a bright left half or a bright right half.
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> u(0, 0.3f);
  Tensor x = Tensor::empty(DType::Float, {16, 1, 28, 28}), y = Tensor::empty(DType::Int64, {16});
  for (int64_t i = 0; i < 16; ++i) {
    y.data<int64_t>()[i] = i % 2;
    for (int64_t p = 0; p < 28 * 28; ++p)
      x.data<float>()[i * 784 + p] = u(rng) + (((p % 28) < 14) == (i % 2 == 0) ? 0.7f : 0.0f);
  }
  Trainer tr(cnn, {{"optimizer", "adam"}, {"learning_rate", "0.01"}});
  const Tensor mean_before = tr.weight("bn1.running_mean").clone();
  const float first = tr.evaluate({{"x", x}, {"label", y}});
  for (int i = 0; i < 15; ++i) tr.step({{"x", x}, {"label", y}});
  EXPECT_LT(tr.evaluate({{"x", x}, {"label", y}}), first);
  // The running statistics moved towards the batch statistics.
  EXPECT_NE(
      std::memcmp(mean_before.raw(), tr.weight("bn1.running_mean").raw(), mean_before.nbytes()), 0);
}

TEST(Trainer, BadOptionsAndInputsAreClearErrors) {
  EXPECT_VOLT_ERROR(Trainer(kMlp, {{"colour", "blue"}}), InvalidArgument, "colour");
  EXPECT_VOLT_ERROR(Trainer(kMlp, {{"learning_rate", "fast"}}), InvalidArgument, "learning_rate",
                    "fast");
  EXPECT_VOLT_ERROR(Trainer(kMlp, {{"optimizer", "lbfgs"}}), InvalidArgument, "optimizer", "lbfgs");
  EXPECT_VOLT_ERROR(Trainer(kMlp, {{"trainable", "nothing."}}), InvalidArgument,
                    "nothing to train");
  EXPECT_VOLT_ERROR(Trainer(kMlp, {{"prediction", "nope"}}), InvalidArgument, "nope");
  EXPECT_VOLT_ERROR(Trainer(kMlp, {{"device", "cuda:0"}}), Device, "cuda:0");
  Trainer tr(kMlp, {{"freeze", "fc1."}});
  EXPECT_EQ(tr.trainable().size(), 4u);
  const Dataset d = synthetic(8, 5);
  EXPECT_VOLT_ERROR(tr.step({{"x", d.x}}), InvalidArgument, "label", "missing");
  EXPECT_VOLT_ERROR(tr.step({{"x", d.x}, {"label", Tensor::empty(DType::Float, {8})}}),
                    InvalidArgument, "label", "int64");
  EXPECT_VOLT_ERROR(tr.step({{"x", rows(d.x, 0, 4)}, {"label", d.y}}), InvalidArgument);
  EXPECT_VOLT_ERROR(
      tr.step({{"x", d.x}, {"label", Tensor::from<int64_t>({0, 1, 2, 3, 4, 5, 6, 99}, {8})}}),
      InvalidArgument, "99");
  EXPECT_VOLT_ERROR(tr.set_learning_rate(-1), InvalidArgument, "learning rate");
  EXPECT_EQ(tr.steps(), 0);
}

TEST(Trainer, NonFiniteValuesSkipTheStepAndKeepTheWeights) {
  Trainer tr(kMlp, {{"learning_rate", "0.1"}});
  Dataset d = synthetic(4, 6);
  const Tensor before = tr.weight("fc1.weight").clone();
  d.x.data<float>()[5] = NAN;
  EXPECT_VOLT_ERROR(tr.step({{"x", d.x}, {"label", d.y}}), Runtime, "not finite");
  EXPECT_EQ(std::memcmp(before.raw(), tr.weight("fc1.weight").raw(), before.nbytes()), 0);
  EXPECT_EQ(tr.steps(), 0);
}

TEST(Trainer, MismatchedCheckpointsAreRefusedAndChangeNothing) {
  Trainer mlp(kMlp);
  const std::string ckpt = temp("mlp.ckpt");
  mlp.save_checkpoint(ckpt);
  ModelBuilder b;
  b.input("x", 1, {2, 3})
      .output("y", 1, {2, 1})
      .initializer("W", {3, 1}, {1, 2, 3})
      .node("MatMul", {"x", "W"}, {"y"});
  const std::string path = temp("small.onnx");
  b.save(path);
  Trainer other(path, {{"loss", "mse"}});
  EXPECT_VOLT_ERROR(other.load_checkpoint(ckpt), InvalidArgument, "'W'");
  EXPECT_EQ(other.weight("W").data<float>()[2], 3.0f);
  Trainer adam(kMlp, {{"optimizer", "adam"}});
  EXPECT_VOLT_ERROR(adam.load_checkpoint(ckpt), InvalidArgument, "optimizer");
  // A truncated file.
  fs::resize_file(ckpt, fs::file_size(ckpt) / 2);
  EXPECT_VOLT_ERROR(mlp.load_checkpoint(ckpt), InvalidArgument, "corrupt");
  EXPECT_VOLT_ERROR(mlp.load_checkpoint(temp("missing.ckpt")), Io);
  fs::remove(ckpt);
  fs::remove(path);
}

}  // namespace
}  // namespace volt
