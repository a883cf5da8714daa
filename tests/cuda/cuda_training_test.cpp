// Training with device=cuda:0 against the same training on the CPU: the forward and backward
// graphs run on the device (the backward kernels of operators/cuda/backward_kernels.cpp, the
// rest of the long tail on the host), the optimizer on the host. Skips without a device.
//
// Tolerances: fp32 on the device sums in another order than the CPU (cuBLAS tiles), a few fp32
// ulps of each sum; after two steps the weights' changes agree to 1e-3 of the largest change.
// mixed_fp16 on both sides rounds to fp16 (relative 4.9e-4 per value) in different places, so
// one step's changes agree to 2e-2 of the largest.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include "cuda/cuda_skip.hpp"
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
  return (fs::temp_directory_path() / ("volt_cuda_train_" + std::to_string(getpid()) + "_" + name))
      .string();
}

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

Tensor random_tensor(Shape shape, uint32_t seed) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  const auto v = random_values(n, seed);
  return Tensor::from<float>(v, std::move(shape));
}

// Trains `model` with `options` on the CPU and on cuda:0 for `steps` steps of `batch`; expects
// every trainable weight's change to agree to `relative` of its largest change, give or take 8
// float ulps of the weight itself: a weight whose gradient is zero but for rounding (a
// convolution's bias before BatchNormalization, which subtracts it again) moves by 6e-11 on the
// CPU and by a few ulps otherwise on the GPU (1.2e-10 on an H200, 2 ulps of its 7.7e-4).
// `also`: further weights (running statistics) compared to `relative` of their largest value.
void expect_same_training(const std::string& model, TrainOptions options, const NamedValues& batch,
                          int steps, float relative, const std::vector<std::string>& also = {}) {
  Trainer cpu(model, options);
  options.push_back({"device", "cuda:0"});
  Trainer gpu(model, options);
  std::map<std::string, Tensor> before;
  for (const auto& name : cpu.trainable()) before[name] = cpu.weight(name).clone();
  for (int s = 0; s < steps; ++s) {
    const float want = cpu.step(batch), got = gpu.step(batch);
    EXPECT_NEAR(got, want, 1e-3f * std::fabs(want) + 1e-6f) << "loss of step " << s;
  }
  EXPECT_EQ(gpu.steps(), cpu.steps());
  for (const auto& [name, w0] : before) {
    const Tensor &a = cpu.weight(name), &b = gpu.weight(name);
    float largest = 0;
    for (int64_t i = 0; i < w0.numel(); ++i)
      largest = std::max(largest, std::fabs(a.data<float>()[i] - w0.data<float>()[i]));
    ASSERT_GT(largest, 0.f) << name << " did not train";
    for (int64_t i = 0; i < w0.numel(); ++i)
      ASSERT_NEAR(b.data<float>()[i], a.data<float>()[i],
                  relative * largest + 1e-6f * std::fabs(a.data<float>()[i]))
          << name << " " << i;
  }
  for (const auto& name : also) {
    const Tensor &a = cpu.weight(name), &b = gpu.weight(name);
    float largest = 0;
    for (int64_t i = 0; i < a.numel(); ++i)
      largest = std::max(largest, std::fabs(a.data<float>()[i]));
    for (int64_t i = 0; i < a.numel(); ++i)
      ASSERT_NEAR(b.data<float>()[i], a.data<float>()[i],
                  relative * largest + 1e-6f * std::fabs(a.data<float>()[i]))
          << name << " " << i;
  }
}

// Activations whose derivatives EltwiseGrad computes, a bias broadcast (SumToShape) and 2-D
// weights (their gradients are Gemm/MatMul nodes).
TEST(CudaTraining, Fp32StepsMatchTheCpu) {
  SKIP_WITHOUT_CUDA();
  ModelBuilder b;
  b.input("x", 1, {5, 6})
      .output("y", 1, {5, 3})
      .initializer("W1", {6, 8}, random_values(48, 1))
      .initializer("b1", {8}, random_values(8, 2))
      .initializer("W2", {8, 8}, random_values(64, 3))
      .initializer("W3", {8, 3}, random_values(24, 4))
      .node("MatMul", {"x", "W1"}, {"h1"})
      .node("Add", {"h1", "b1"}, {"h2"})
      .node("Tanh", {"h2"}, {"h3"})
      .node("MatMul", {"h3", "W2"}, {"h4"})
      .node("Sigmoid", {"h4"}, {"h5"})
      .node("Softplus", {"h5"}, {"h6"})
      .node("Relu", {"h6"}, {"h7"})
      .node("MatMul", {"h7", "W3"}, {"y"});
  const std::string path = temp("activations.onnx");
  b.save(path);
  expect_same_training(path, {{"loss", "mse"}, {"learning_rate", "0.5"}},
                       {{"x", random_tensor({5, 6}, 5)}, {"label", random_tensor({5, 3}, 6)}}, 2,
                       1e-3f);
  fs::remove(path);
}

// Weights of rank 3: MatMulGrad for a batch of weights, and for one weight broadcast over it.
TEST(CudaTraining, BatchedMatMulGradientsMatchTheCpu) {
  SKIP_WITHOUT_CUDA();
  ModelBuilder b;
  b.input("x", 1, {2, 3, 4})
      .output("y", 1, {2, 3, 6})
      .initializer("Wb", {2, 4, 5}, random_values(40, 7))
      .initializer("Ws", {1, 5, 6}, random_values(30, 8))
      .node("MatMul", {"x", "Wb"}, {"h"})
      .node("MatMul", {"h", "Ws"}, {"y"});
  const std::string path = temp("batched.onnx");
  b.save(path);
  expect_same_training(
      path, {{"loss", "mse"}, {"learning_rate", "0.1"}},
      {{"x", random_tensor({2, 3, 4}, 9)}, {"label", random_tensor({2, 3, 6}, 10)}}, 2, 1e-3f);
  fs::remove(path);
}

// LayerNormalization's and Softmax's gradients (a transformer block's row-wise pieces).
TEST(CudaTraining, LayerNormAndSoftmaxGradientsMatchTheCpu) {
  SKIP_WITHOUT_CUDA();
  ModelBuilder b(17);
  b.input("x", 1, {6, 10})
      .output("y", 1, {6, 4})
      .initializer("W1", {10, 12}, random_values(120, 21))
      .initializer("gamma", {12}, random_values(12, 22))
      .initializer("beta", {12}, random_values(12, 23))
      .initializer("W2", {12, 4}, random_values(48, 24))
      .node("MatMul", {"x", "W1"}, {"h"})
      .node("LayerNormalization", {"h", "gamma", "beta"}, {"n"})
      .node("Softmax", {"n"}, {"s"})
      .node("MatMul", {"s", "W2"}, {"l"})
      .node("LogSoftmax", {"l"}, {"y"});
  const std::string path = temp("rows.onnx");
  b.save(path);
  expect_same_training(path, {{"loss", "mse"}, {"learning_rate", "0.5"}},
                       {{"x", random_tensor({6, 10}, 25)}, {"label", random_tensor({6, 4}, 26)}}, 2,
                       1e-3f);
  fs::remove(path);
}

// An embedding table: with dense gradients GatherGrad scatters on the device (repeated ids sum);
// with row-sparse ones (the default) RowSparseGrad collects them on the host.
TEST(CudaTraining, EmbeddingGradientsMatchTheCpu) {
  SKIP_WITHOUT_CUDA();
  ModelBuilder b(17);
  b.input("ids", 7, {4, 3})
      .output("y", 1, {4, 3, 2})
      .initializer("table", {10, 6}, random_values(60, 31))
      .initializer("W", {6, 2}, random_values(12, 32))
      .node("Gather", {"table", "ids"}, {"rows"})
      .node("MatMul", {"rows", "W"}, {"y"});
  const std::string path = temp("embedding.onnx");
  b.save(path);
  const NamedValues batch = {
      {"ids", Tensor::from<int64_t>({1, 3, 3, 0, 9, 1, 1, 7, 2, 3, 5, 9}, {4, 3})},
      {"label", random_tensor({4, 3, 2}, 33)}};
  for (const char* sparse : {"off", "auto"})
    expect_same_training(path,
                         {{"loss", "mse"}, {"learning_rate", "0.5"}, {"sparse_gradients", sparse}},
                         batch, 2, 1e-3f);
  fs::remove(path);
}

TEST(CudaTraining, TheBundledMlpMatchesTheCpuInFp32AndMixedFp16) {
  SKIP_WITHOUT_CUDA();
  const Dataset d = synthetic(64, 12);
  const NamedValues batch = {{"x", d.x}, {"label", d.y}};
  expect_same_training(kMlp, {{"learning_rate", "0.1"}}, batch, 2, 1e-3f);
  expect_same_training(kMlp, {{"learning_rate", "0.1"}, {"precision", "mixed_fp16"}}, batch, 1,
                       2e-2f);
}

// ConvGrad (data and weights), BiasGrad, PoolGrad, and BatchNormalization in training form (its
// running statistics by ONNX's rule) and its gradient, on cuDNN.
TEST(CudaTraining, TheBundledCnnMatchesTheCpu) {
  SKIP_WITHOUT_CUDA();
  const std::string cnn = std::string(VOLT_SOURCE_DIR) + "/models/small_cnn.onnx";
  Tensor y = Tensor::empty(DType::Int64, {6});
  for (int64_t i = 0; i < 6; ++i) y.data<int64_t>()[i] = i % 2;
  expect_same_training(cnn, {{"learning_rate", "0.05"}},
                       {{"x", random_tensor({6, 1, 28, 28}, 13)}, {"label", y}}, 2, 1e-3f,
                       {"bn1.running_mean", "bn1.running_var"});
}

TEST(CudaTraining, MixedFp16TrainsTheBundledMlpOnTheDevice) {
  SKIP_WITHOUT_CUDA();
  const Dataset train = synthetic(2048, 1), held_out = synthetic(512, 2);
  Trainer tr(kMlp, {{"optimizer", "adam"},
                    {"learning_rate", "0.001"},
                    {"device", "cuda:0"},
                    {"precision", "mixed_fp16"}});
  for (int64_t b = 0; b < 2048; b += 64)
    tr.step({{"x", rows(train.x, b, 64)}, {"label", rows(train.y, b, 64)}});
  EXPECT_EQ(tr.steps() + tr.skipped_steps(), 32);
  EXPECT_GE(accuracy(tr, held_out), 0.9);
}

}  // namespace
}  // namespace volt
