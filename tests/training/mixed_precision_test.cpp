// precision=mixed_fp16: fp16 compute from fp32 master weights with dynamic loss scaling. These
// run on the CPU, whose fp16 kernels are the reference ones: the mechanism (casts, the scaled
// backward pass, unscaling, skipping and backing off, checkpoints) is the same as on a GPU.
//
// Tolerance: fp16 keeps 11 significant bits, so each stored value is off by up to 2^-11
// (relative 4.9e-4). A gradient here is a product of three or four rounded factors (input,
// weight, upstream gradient, activation mask), summed over the batch in fp32: a few times
// 4.9e-4 per term, below 1% of the largest update. The fp32 loss of fp16 logits is within 1%.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

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
const std::string kCnn = std::string(VOLT_SOURCE_DIR) + "/models/small_cnn.onnx";

std::string temp(const std::string& name) {
  return (fs::temp_directory_path() / ("volt_mixed_" + std::to_string(getpid()) + "_" + name))
      .string();
}

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

TEST(MixedFp16, OneStepMatchesFp32WithinHalfPrecision) {
  const Dataset d = synthetic(16, 11);
  const TrainOptions sgd = {{"learning_rate", "0.1"}};
  TrainOptions mixed_options = sgd;
  mixed_options.push_back({"precision", "mixed_fp16"});
  Trainer fp32(kMlp, sgd), mixed(kMlp, mixed_options);
  EXPECT_EQ(mixed.loss_scale(), 65536.f);  // 2^16
  EXPECT_EQ(fp32.loss_scale(), 1.f);
  std::map<std::string, Tensor> before;
  for (const auto& name : fp32.trainable()) before[name] = fp32.weight(name).clone();
  const float loss32 = fp32.step({{"x", d.x}, {"label", d.y}});
  const float loss16 = mixed.step({{"x", d.x}, {"label", d.y}});
  EXPECT_NEAR(loss16, loss32, 1e-2f * loss32);
  ASSERT_EQ(mixed.steps(), 1);
  EXPECT_EQ(mixed.skipped_steps(), 0);
  for (const auto& [name, w0] : before) {
    const Tensor &w32 = fp32.weight(name), &w16 = mixed.weight(name);
    ASSERT_EQ(w16.dtype(), DType::Float) << name << ": the master weights stay fp32";
    std::vector<float> d32(static_cast<size_t>(w0.numel())), d16(d32.size());
    for (int64_t i = 0; i < w0.numel(); ++i) {
      d32[i] = w32.data<float>()[i] - w0.data<float>()[i];
      d16[i] = w16.data<float>()[i] - w0.data<float>()[i];
    }
    const float tol = 1e-2f * max_abs(d32);
    ASSERT_GT(max_abs(d32), 0.f) << name;
    for (size_t i = 0; i < d32.size(); ++i) ASSERT_NEAR(d16[i], d32[i], tol) << name << " " << i;
  }
}

// y = x W with x = 10, W = 1, label 0: dL/dy = 2 y = 20, dL/dW = 200. Scaled by s, dL/dy is
// 20 s in fp16 and dL/dW 200 s: both overflow fp16 (max 65504) until s <= 256, reached after
// eight halvings of 2^16. The ninth step applies the exact, unscaled update.
std::string overflowing_linear_model() {
  ModelBuilder b;
  b.input("x", 1, {1, 1})
      .output("y", 1, {1, 1})
      .initializer("W", {1, 1}, {1.0f})
      .node("MatMul", {"x", "W"}, {"y"});
  const std::string path = temp("linear.onnx");
  b.save(path);
  return path;
}

TEST(MixedFp16, OverflowSkipsTheStepHalvesTheScaleAndKeepsTheWeights) {
  const std::string path = overflowing_linear_model();
  const TrainOptions options = {{"loss", "mse"},
                                {"learning_rate", "0.001"},
                                {"precision", "mixed_fp16"},
                                {"trainable", "W"}};  // one element: not a weight by default
  Trainer tr(path, options);
  const NamedValues batch = {{"x", Tensor::from<float>({10}, {1, 1})},
                             {"label", Tensor::from<float>({0}, {1, 1})}};
  for (int i = 1; i <= 8; ++i) {
    EXPECT_FLOAT_EQ(tr.step(batch), 100.f) << "a skipped step still reports its loss";
    EXPECT_EQ(tr.skipped_steps(), i);
    EXPECT_EQ(tr.loss_scale(), 65536.f / static_cast<float>(1 << i));
    EXPECT_EQ(tr.weight("W").data<float>()[0], 1.0f) << "skipped steps change nothing";
  }
  EXPECT_EQ(tr.steps(), 0);
  tr.step(batch);
  EXPECT_EQ(tr.steps(), 1);
  EXPECT_EQ(tr.skipped_steps(), 8);
  EXPECT_EQ(tr.loss_scale(), 256.f);
  EXPECT_NEAR(tr.weight("W").data<float>()[0], 1.0f - 0.001f * 200.f, 1e-6f);

  // A checkpoint carries the scaler; resuming continues from 256, not 2^16.
  const std::string ckpt = temp("scaler.ckpt");
  tr.save_checkpoint(ckpt);
  Trainer resumed(path, options);
  resumed.load_checkpoint(ckpt);
  EXPECT_EQ(resumed.loss_scale(), 256.f);
  EXPECT_EQ(resumed.skipped_steps(), 8);
  EXPECT_EQ(resumed.steps(), 1);
  // An fp32 trainer reads the same checkpoint (the scaler's entries are not weights).
  Trainer fp32(path, {{"loss", "mse"}, {"learning_rate", "0.001"}, {"trainable", "W"}});
  fp32.load_checkpoint(ckpt);
  EXPECT_EQ(fp32.weight("W").data<float>()[0], tr.weight("W").data<float>()[0]);
  fs::remove(ckpt);
  fs::remove(path);
}

TEST(MixedFp16, TrainsTheBundledMlp) {
  const Dataset train = synthetic(512, 1), held_out = synthetic(256, 2);
  Trainer tr(kMlp, {{"optimizer", "adam"},
                    {"learning_rate", "0.001"},
                    {"precision", "mixed_fp16"},
                    {"threads", "2"}});
  for (int64_t b = 0; b < 512; b += 32)
    tr.step({{"x", rows(train.x, b, 32)}, {"label", rows(train.y, b, 32)}});
  EXPECT_EQ(tr.steps() + tr.skipped_steps(), 16);
  EXPECT_GE(accuracy(tr, held_out), 0.9);
  // predict() computes in fp16 too and returns the model's declared fp32.
  EXPECT_EQ(tr.predict({{"x", held_out.x}})[0].tensor().dtype(), DType::Float);
}

TEST(MixedFp16, BatchNormRunningStatisticsStayFp32) {
  Tensor x = Tensor::empty(DType::Float, {4, 1, 28, 28}), y = Tensor::empty(DType::Int64, {4});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 29) / 29.f;
  for (int64_t i = 0; i < 4; ++i) y.data<int64_t>()[i] = i % 2;
  Trainer tr(kCnn, {{"optimizer", "adam"}, {"learning_rate", "0.01"}, {"precision", "mixed_fp16"}});
  const Tensor mean_before = tr.weight("bn1.running_mean").clone();
  const float first = tr.evaluate({{"x", x}, {"label", y}});
  for (int i = 0; i < 5; ++i) tr.step({{"x", x}, {"label", y}});
  EXPECT_LT(tr.evaluate({{"x", x}, {"label", y}}), first);
  const Tensor& mean = tr.weight("bn1.running_mean");
  ASSERT_EQ(mean.dtype(), DType::Float);
  EXPECT_NE(std::memcmp(mean_before.raw(), mean.raw(), mean.nbytes()), 0);
}

}  // namespace
}  // namespace volt
