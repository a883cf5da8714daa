#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "loaders/npy.hpp"
#include "model_builder.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;
const std::string kModels = std::string(VOLT_SOURCE_DIR) + "/models/";

float max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  float d = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    d = std::max(d, std::abs(a.data<float>()[i] - b.data<float>()[i]));
  return d;
}

// The bundled models against the numpy references written by models/make_models.py.
// fp32 with different summation orders: 1e-4 absolute on values of order 1.
TEST(Session, BundledModelsMatchTheirReferences) {
  for (const std::string name : {"mnist_mlp", "small_cnn"}) {
    for (int threads : {1, 2}) {
      Session s(kModels + name + ".onnx", {.threads = threads});
      const Tensor x = read_npy(kModels + name + ".input.npy");
      const Tensor want = read_npy(kModels + name + ".output.npy");
      auto out = s.run({{"x", x}});
      ASSERT_EQ(out.size(), 1u);
      EXPECT_LT(max_abs_diff(out[0].tensor(), want), 1e-4f) << name << " threads " << threads;
    }
  }
}

TEST(Session, ReportsInputsAndOutputsWithSymbolicDims) {
  Session s(kModels + "mnist_mlp.onnx");
  ASSERT_EQ(s.inputs().size(), 1u);
  EXPECT_EQ(s.inputs()[0].name, "x");
  EXPECT_EQ(s.inputs()[0].dtype, DType::Float);
  EXPECT_EQ(s.inputs()[0].shape[0].symbol, "batch");
  EXPECT_EQ(s.inputs()[0].shape[1].value, 784);
  EXPECT_EQ(s.inputs()[0].describe(), "float32[batch,784]");
  EXPECT_EQ(s.outputs()[0].name, "logits");
}

TEST(Session, ReportsTheModelsMetadata) {
  const Session s(kModels + "mnist_mlp.onnx");
  const ModelMetadata& m = s.metadata();
  EXPECT_EQ(m.producer_name, "volt/models/make_models.py");
  EXPECT_EQ(m.opsets, (std::map<std::string, int64_t>{{"ai.onnx", 13}}));
  EXPECT_GE(m.ir_version, 7);
  EXPECT_EQ(device_count(Device::Kind::Cpu), 1);
  EXPECT_GE(device_count(Device::Kind::Cuda), 0);  // 0 without a GPU: a count, never an error
}

TEST(Session, DifferentBatchSizesGetTheirOwnPlans) {
  Session s(kModels + "mnist_mlp.onnx", {.threads = 1});
  const Tensor x = read_npy(kModels + "mnist_mlp.input.npy");  // [4,784]
  const Tensor want = read_npy(kModels + "mnist_mlp.output.npy");
  for (int64_t b : {1, 3, 4, 2, 1}) {
    Tensor xb = Tensor::copy_of(DType::Float, {b, 784}, x.raw());
    auto out = s.run({{"x", xb}});
    ASSERT_EQ(out[0].tensor().shape(), (Shape{b, 10}));
    for (int64_t i = 0; i < b * 10; ++i)
      EXPECT_NEAR(out[0].tensor().data<float>()[i], want.data<float>()[i], 1e-4f);
  }
}

TEST(Session, BadInputsAreClearErrors) {
  Session s(kModels + "mnist_mlp.onnx");
  EXPECT_VOLT_ERROR(s.run({{"x", Tensor::empty(DType::Double, {1, 784})}}), InvalidArgument,
                    "input 'x'", "float32", "float64");
  EXPECT_VOLT_ERROR(s.run({{"x", Tensor::empty(DType::Float, {1, 785})}}), InvalidArgument,
                    "input 'x'", "[batch,784]", "[1,785]");
  EXPECT_VOLT_ERROR(s.run({{"x", Tensor::empty(DType::Float, {784})}}), InvalidArgument,
                    "input 'x'");
  EXPECT_VOLT_ERROR(s.run({{"y", Tensor::empty(DType::Float, {1, 784})}}), InvalidArgument,
                    "unknown input 'y'", "x");
  EXPECT_VOLT_ERROR(s.run({}), InvalidArgument, "input 'x'", "missing");
  EXPECT_VOLT_ERROR(s.run({{"x", Value::sequence({})}}), InvalidArgument, "must be a tensor");
  EXPECT_VOLT_ERROR(s.run({{"x", Tensor::empty(DType::Float, {1, 784})}}, {"nope"}),
                    InvalidArgument, "unknown output 'nope'");
  // The session still works after all that.
  EXPECT_EQ(s.run({{"x", Tensor::empty(DType::Float, {2, 784})}})[0].tensor().shape(),
            (Shape{2, 10}));
}

TEST(Session, RunTimeShapeErrorsNameTheNode) {
  // Reshape to a shape fed at run time that does not fit.
  ModelBuilder b;
  b.input("x", 1, {2, 3})
      .input("shape", 7, {2})
      .output("y", 1, {-1, -1})
      .node("Reshape", {"x", "shape"}, {"y"}, {}, "reshape_it");
  const std::string bytes = b.bytes();
  Session s = Session::from_bytes(bytes.data(), bytes.size());
  auto ok = s.run({{"x", Tensor::from<float>({1, 2, 3, 4, 5, 6}, {2, 3})},
                   {"shape", Tensor::from<int64_t>({3, -1}, {2})}});
  EXPECT_EQ(ok[0].tensor().shape(), (Shape{3, 2}));
  EXPECT_VOLT_ERROR(s.run({{"x", Tensor::from<float>({1, 2, 3, 4, 5, 6}, {2, 3})},
                           {"shape", Tensor::from<int64_t>({4, -1}, {2})}}),
                    InvalidArgument, "reshape_it", "Reshape", "[2,3]");
}

TEST(Session, OutputsWhoseShapeDependsOnRunTimeValuesAreAllocated) {
  // ReduceSum's axes come from a graph input: the plan cannot know the output shape, the run can.
  ModelBuilder b;
  b.input("x", 1, {2, 3})
      .input("axes", 7, {1})
      .output("y", 1, {-1, -1})
      .node("ReduceSum", {"x", "axes"}, {"y"});
  const std::string bytes = b.bytes();
  Session s = Session::from_bytes(bytes.data(), bytes.size());
  const Tensor x = Tensor::from<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  auto rows = s.run({{"x", x}, {"axes", Tensor::from<int64_t>({1}, {1})}});
  EXPECT_EQ(rows[0].tensor().shape(), (Shape{2, 1}));
  EXPECT_EQ(rows[0].tensor().data<float>()[1], 15.0f);
  auto cols = s.run({{"x", x}, {"axes", Tensor::from<int64_t>({0}, {1})}});
  EXPECT_EQ(cols[0].tensor().shape(), (Shape{1, 3}));
  EXPECT_EQ(cols[0].tensor().data<float>()[2], 9.0f);
}

TEST(Session, OutputsOwnTheirMemory) {
  // y = Identity(x) and z = Reshape of an intermediate: both must be copies the caller owns,
  // unchanged by later runs.
  ModelBuilder b;
  b.input("x", 1, {4}).output("y", 1, {4}).output("z", 1, {2, 2}).initializer_i64("s", {2}, {2, 2});
  b.node("Identity", {"x"}, {"y"}).node("Relu", {"x"}, {"r"}).node("Reshape", {"r", "s"}, {"z"});
  const std::string bytes = b.bytes();
  Session s = Session::from_bytes(bytes.data(), bytes.size());
  Tensor x = Tensor::from<float>({1, -2, 3, -4}, {4});
  auto first = s.run({{"x", x}});
  x.data<float>()[0] = 100;
  s.run({{"x", Tensor::from<float>({9, 9, 9, 9}, {4})}});
  EXPECT_EQ(first[0].tensor().data<float>()[0], 1.0f);
  EXPECT_EQ(first[1].tensor().data<float>()[2], 3.0f);
  EXPECT_EQ(first[1].tensor().data<float>()[1], 0.0f);
}

TEST(Session, ConcurrentRunsGiveTheSingleThreadedResult) {
  Session s(kModels + "small_cnn.onnx", {.threads = 1});
  std::vector<Tensor> inputs, expected;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0, 1);
  for (int64_t b : {1, 2, 3, 5}) {
    Tensor x = Tensor::empty(DType::Float, {b, 1, 28, 28});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
    inputs.push_back(x);
    expected.push_back(s.run({{"x", x}})[0].tensor());
  }
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        const size_t k = static_cast<size_t>(t + i) % inputs.size();
        const Tensor got = s.run({{"x", inputs[k]}})[0].tensor();
        if (std::memcmp(got.raw(), expected[k].raw(), got.nbytes()) != 0) ++mismatches;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(Session, OptionsAreChecked) {
  EXPECT_VOLT_ERROR(Session(kModels + "mnist_mlp.onnx", {.threads = -1}), InvalidArgument,
                    "threads");
  EXPECT_VOLT_ERROR(Session(kModels + "mnist_mlp.onnx", {.optimization_level = 7}), InvalidArgument,
                    "optimization_level");
  EXPECT_VOLT_ERROR(Session(kModels + "mnist_mlp.onnx", {.device = "tpu"}), Device, "tpu");
}

}  // namespace
}  // namespace volt
