// The CUDA kernels against the CPU kernels: the same small models run in a CPU session and in a
// cuda:0 session on awkward shapes (odd sizes, broadcasting, batches), outputs compared.
// Without a CUDA device (or in a build without the backend) every test skips and says why.
//
// Tolerances: fp32 kernels accumulate in a different order than the CPU's (cuBLAS/cuDNN tile
// their sums), so results agree to a few fp32 ulps of the sums' magnitude: relative 1e-4 of the
// output's largest value. fp16 storage rounds each value to 11 significant bits (relative
// 2^-11 ~ 4.9e-4) and products of K terms accumulate that rounding about sqrt(K) times: the fp16
// comparisons allow 1e-2 of the output's largest value for K up to a few hundred.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cuda/cuda_skip.hpp"
#include "model_builder.hpp"
#include "runtime/device.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

Tensor random_tensor(Shape shape, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  Tensor t = Tensor::empty(DType::Float, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

Tensor to_half(const Tensor& t) {
  Tensor h = Tensor::empty(DType::Float16, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) h.data<Float16>()[i] = Float16(t.data<float>()[i]);
  return h;
}

float value_at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::Float16 ? static_cast<float>(t.data<Float16>()[i])
                                     : t.data<float>()[i];
}

using Inputs = std::vector<std::pair<std::string, Tensor>>;

// Runs `cpu_model` on the CPU with fp32 inputs and `gpu_model` on cuda:0 with the same inputs
// (rounded to fp16 when `half`: then gpu_model is the fp16 twin), compares output 0.
void expect_same_on_cuda(const std::string& cpu_model, const std::string& gpu_model,
                         const Inputs& inputs, bool half, float relative) {
  Session cpu = Session::from_bytes(cpu_model.data(), cpu_model.size());
  Session gpu = Session::from_bytes(gpu_model.data(), gpu_model.size(), {.device = "cuda:0"});
  NamedValues cpu_in, gpu_in;
  for (const auto& [name, t] : inputs) {
    cpu_in.push_back({name, t});
    gpu_in.push_back({name, half ? to_half(t) : t});
  }
  const Tensor want = cpu.run(cpu_in)[0].tensor();
  const Tensor got = gpu.run(gpu_in)[0].tensor();
  ASSERT_TRUE(got.device().is_cpu());
  ASSERT_EQ(got.shape(), want.shape());
  float scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::fabs(value_at(want, i)));
  const float tol = relative * std::max(scale, 1e-6f);
  for (int64_t i = 0; i < want.numel(); ++i)
    ASSERT_NEAR(value_at(got, i), value_at(want, i), tol) << "element " << i;
}

void expect_same_on_cuda(const std::string& model, const Inputs& inputs, float relative) {
  expect_same_on_cuda(model, model, inputs, false, relative);
}

TEST(Cuda, BinaryOpsBroadcastLikeTheCpu) {
  SKIP_WITHOUT_CUDA();
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    ModelBuilder m(17);
    m.input("a", 1, {3, 1, 7}).input("b", 1, {5, 1}).output_any("y", 1).node(op, {"a", "b"}, {"y"});
    expect_same_on_cuda(
        m.bytes(), {{"a", random_tensor({3, 1, 7}, 1)}, {"b", random_tensor({5, 1}, 2, 0.5f, 2.f)}},
        1e-6f);
  }
}

TEST(Cuda, ActivationsMatchTheCpu) {
  SKIP_WITHOUT_CUDA();
  for (const char* op : {"Relu", "Sigmoid", "Tanh", "Exp", "Abs", "Neg", "Erf", "Softplus"}) {
    ModelBuilder m(17);
    m.input("x", 1, {2, 33, 5}).output_any("y", 1).node(op, {"x"}, {"y"});
    expect_same_on_cuda(m.bytes(), {{"x", random_tensor({2, 33, 5}, 3)}}, 1e-5f);
  }
}

TEST(Cuda, SoftmaxAndLayerNormOverOddRows) {
  SKIP_WITHOUT_CUDA();
  for (int64_t cols : {1, 7, 1000, 3000}) {
    ModelBuilder m(17);
    m.input("x", 1, {3, cols}).output_any("y", 1).node("Softmax", {"x"}, {"y"});
    expect_same_on_cuda(m.bytes(), {{"x", random_tensor({3, cols}, 4, -5, 5)}}, 1e-5f);
    ModelBuilder ln(17);
    std::vector<float> ones(static_cast<size_t>(cols), 1.5f),
        zeros(static_cast<size_t>(cols), 0.25f);
    ln.input("x", 1, {3, cols})
        .initializer("s", {cols}, ones)
        .initializer("b", {cols}, zeros)
        .output_any("y", 1)
        .node("LayerNormalization", {"x", "s", "b"}, {"y"});
    expect_same_on_cuda(ln.bytes(), {{"x", random_tensor({3, cols}, 5)}}, 1e-4f);
  }
}

TEST(Cuda, MatMulAndGemmMatchTheCpuInFp32AndFp16) {
  SKIP_WITHOUT_CUDA();
  auto matmul = [](int elem) {
    ModelBuilder m(17);
    m.input("a", elem, {4, 17, 65})
        .input("b", elem, {65, 33})
        .output_any("y", elem)
        .node("MatMul", {"a", "b"}, {"y"});
    return m.bytes();
  };
  const Inputs in = {{"a", random_tensor({4, 17, 65}, 6)}, {"b", random_tensor({65, 33}, 7)}};
  expect_same_on_cuda(matmul(1), in, 1e-4f);
  expect_same_on_cuda(matmul(1), matmul(10), in, true, 1e-2f);
  ModelBuilder g(17);
  g.input("a", 1, {31, 9})
      .input("b", 1, {13, 31})
      .input("c", 1, {13})
      .output_any("y", 1)
      .node("Gemm", {"a", "b", "c"}, {"y"}, [](onnx::NodeProto& n) {
        ModelBuilder::set_int(n, "transA", 1);
        ModelBuilder::set_int(n, "transB", 1);
        ModelBuilder::set_float(n, "alpha", 0.5f);
        ModelBuilder::set_float(n, "beta", 2.f);
      });
  expect_same_on_cuda(g.bytes(),
                      {{"a", random_tensor({31, 9}, 8)},
                       {"b", random_tensor({13, 31}, 9)},
                       {"c", random_tensor({13}, 10)}},
                      1e-4f);
}

TEST(Cuda, ConvolutionAndPoolingMatchTheCpu) {
  SKIP_WITHOUT_CUDA();
  ModelBuilder m(17);
  m.input("x", 1, {2, 6, 13, 11})
      .input("w", 1, {8, 3, 3, 3})
      .input("bias", 1, {8})
      .output_any("y", 1)
      .node("Conv", {"x", "w", "bias"}, {"c"},
            [](onnx::NodeProto& n) {
              ModelBuilder::set_int(n, "group", 2);
              ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
              ModelBuilder::set_ints(n, "strides", {2, 1});
            })
      .node("Relu", {"c"}, {"r"})
      .node("MaxPool", {"r"}, {"p"},
            [](onnx::NodeProto& n) {
              ModelBuilder::set_ints(n, "kernel_shape", {2, 2});
            })
      .node("GlobalAveragePool", {"p"}, {"y"});
  expect_same_on_cuda(m.bytes(),
                      {{"x", random_tensor({2, 6, 13, 11}, 11)},
                       {"w", random_tensor({8, 3, 3, 3}, 12)},
                       {"bias", random_tensor({8}, 13)}},
                      1e-4f);
}

// Strides, pads, output_padding, groups and a bias; then output_shape with an asymmetric pad
// (declined by the CUDA kernel: it runs on the host, and the answer is the same).
TEST(Cuda, ConvTransposeMatchesTheCpu) {
  SKIP_WITHOUT_CUDA();
  ModelBuilder m(17);
  m.input("x", 1, {2, 4, 5, 7})
      .input("w", 1, {4, 3, 3, 3})
      .input("bias", 1, {6})
      .output_any("y", 1)
      .node("ConvTranspose", {"x", "w", "bias"}, {"y"}, [](onnx::NodeProto& n) {
        ModelBuilder::set_ints(n, "strides", {2, 2});
        ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
        ModelBuilder::set_ints(n, "output_padding", {1, 0});
        ModelBuilder::set_int(n, "group", 2);
      });
  const Inputs inputs = {{"x", random_tensor({2, 4, 5, 7}, 31)},
                         {"w", random_tensor({4, 3, 3, 3}, 32)},
                         {"bias", random_tensor({6}, 33)}};
  expect_same_on_cuda(m.bytes(), inputs, 1e-4f);
  ModelBuilder shaped(17);
  shaped.input("x", 1, {2, 4, 5, 7})
      .input("w", 1, {4, 3, 3, 3})
      .input("bias", 1, {6})
      .output_any("y", 1)
      .node("ConvTranspose", {"x", "w", "bias"}, {"y"}, [](onnx::NodeProto& n) {
        ModelBuilder::set_ints(n, "strides", {2, 2});
        ModelBuilder::set_ints(n, "output_shape", {10, 14});
        ModelBuilder::set_int(n, "group", 2);
      });
  expect_same_on_cuda(shaped.bytes(), inputs, 1e-4f);
}

// A CSR input multiplied as it is on cuSPARSE (MatMul, and Gemm with alpha, beta and a
// broadcast C), with an empty row, against the CPU's sparse kernel.
TEST(Cuda, CsrInputsMultiplyOnCuSparse) {
  SKIP_WITHOUT_CUDA();
  ModelBuilder m(17);
  const Tensor w = random_tensor({7, 3}, 41), c = random_tensor({3}, 42);
  m.input("x", 1, {5, 7})
      .initializer("w", {7, 3}, std::vector<float>(w.data<float>(), w.data<float>() + 21))
      .initializer("c", {3}, std::vector<float>(c.data<float>(), c.data<float>() + 3))
      .output_any("y", 1)
      .output_any("z", 1)
      .node("MatMul", {"x", "w"}, {"y"})
      .node("Gemm", {"x", "w", "c"}, {"z"}, [](onnx::NodeProto& n) {
        ModelBuilder::set_float(n, "alpha", 0.5f);
        ModelBuilder::set_float(n, "beta", 2.0f);
      });
  // Rows 0 and 3 hold values, row 2 is empty; columns unsorted within row 3.
  const std::vector<int64_t> offsets = {0, 2, 3, 3, 6, 7}, columns = {1, 6, 0, 5, 2, 4, 3};
  const std::vector<float> values = {0.5f, -1.f, 2.f, 0.25f, -0.75f, 1.5f, 3.f};
  const CsrTensor x =
      CsrTensor::copy_of(DType::Float, 5, 7, 7, offsets.data(), columns.data(), values.data());
  const std::string bytes = m.bytes();
  Session cpu = Session::from_bytes(bytes.data(), bytes.size());
  Session gpu = Session::from_bytes(bytes.data(), bytes.size(), {.device = "cuda:0"});
  const auto want = cpu.run({{"x", x}}), got = gpu.run({{"x", x}});
  for (size_t o = 0; o < 2; ++o) {
    const Tensor &a = want[o].tensor(), &b = got[o].tensor();
    ASSERT_EQ(a.shape(), b.shape());
    for (int64_t i = 0; i < a.numel(); ++i)
      ASSERT_NEAR(b.data<float>()[i], a.data<float>()[i], 1e-5f) << "output " << o << " " << i;
  }
}

// BERT's attention as exported (Kᵀ by Transpose, a scale, an additive mask broadcast over heads
// and queries): one fused Attention node on the device, against the unfused ops on the CPU, in
// fp32 and fp16. Keys 5 and 9 of the second sequence are masked.
TEST(Cuda, FusedAttentionMatchesTheCpuInFp32AndFp16) {
  SKIP_WITHOUT_CUDA();
  auto attention = [](int elem) {
    ModelBuilder m(17);
    m.input("q", elem, {2, 3, 17, 8})
        .input("k", elem, {2, 3, 19, 8})
        .input("v", elem, {2, 3, 19, 5})
        .input("mask", elem, {2, 1, 1, 19})
        .output_any("y", elem)
        .node("Transpose", {"k"}, {"kt"},
              [](onnx::NodeProto& n) {
                ModelBuilder::set_ints(n, "perm", {0, 1, 3, 2});
              })
        .node("MatMul", {"q", "kt"}, {"s"});
    auto* c = m.proto().mutable_graph()->add_initializer();  // the scale, in the model's type
    c->set_name("c");
    c->set_data_type(elem);
    if (elem == 10)
      c->add_int32_data(Float16(std::sqrt(8.0f)).bits);
    else
      c->add_float_data(std::sqrt(8.0f));
    m.node("Div", {"s", "c"}, {"s2"})
        .node("Add", {"s2", "mask"}, {"s3"})
        .node("Softmax", {"s3"}, {"p"})
        .node("MatMul", {"p", "v"}, {"y"});
    return m.bytes();
  };
  Tensor mask = Tensor::empty(DType::Float, {2, 1, 1, 19});
  for (int64_t i = 0; i < 38; ++i) mask.data<float>()[i] = (i == 24 || i == 28) ? -10000.f : 0.f;
  const Inputs in = {{"q", random_tensor({2, 3, 17, 8}, 51)},
                     {"k", random_tensor({2, 3, 19, 8}, 52)},
                     {"v", random_tensor({2, 3, 19, 5}, 53)},
                     {"mask", mask}};
  expect_same_on_cuda(attention(1), in, 1e-4f);
  expect_same_on_cuda(attention(1), attention(10), in, true, 1e-2f);
}

// precision=fp16 keeps the convolutions channels-last: the first reads the NCHW input and
// permutes it, weights are reordered once per plan, the pool reads NHWC, and a Transpose brings
// the result back; against the CPU in fp32 (fp16 tolerance).
TEST(Cuda, Fp16ConvolutionsRunChannelsLast) {
  SKIP_WITHOUT_CUDA();
  ModelBuilder m(17);
  const Tensor w1 = random_tensor({16, 3, 3, 3}, 61), w2 = random_tensor({16, 16, 1, 1}, 62),
               b2 = random_tensor({16}, 63);
  auto values = [](const Tensor& t) {
    return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
  };
  m.input("x", 1, {2, 3, 15, 13})
      .initializer("w1", {16, 3, 3, 3}, values(w1))
      .initializer("w2", {16, 16, 1, 1}, values(w2))
      .initializer("b2", {16}, values(b2))
      .output_any("y", 1)
      .node("Conv", {"x", "w1"}, {"c1"},
            [](onnx::NodeProto& n) {
              ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
            })
      .node("Relu", {"c1"}, {"r"})
      .node("Conv", {"r", "w2", "b2"}, {"c2"})
      .node("Add", {"c2", "r"}, {"s"})
      .node("MaxPool", {"s"}, {"y"}, [](onnx::NodeProto& n) {
        ModelBuilder::set_ints(n, "kernel_shape", {2, 2});
        ModelBuilder::set_ints(n, "strides", {2, 2});
      });
  const std::string bytes = m.bytes();
  Session cpu = Session::from_bytes(bytes.data(), bytes.size());
  Session gpu =
      Session::from_bytes(bytes.data(), bytes.size(), {.device = "cuda:0", .precision = "fp16"});
  const Tensor x = random_tensor({2, 3, 15, 13}, 64);
  const Tensor want = cpu.run({{"x", x}})[0].tensor(), got = gpu.run({{"x", x}})[0].tensor();
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.dtype(), DType::Float);
  float scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i)
    scale = std::max(scale, std::fabs(want.data<float>()[i]));
  for (int64_t i = 0; i < want.numel(); ++i)
    ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-2f * scale) << i;
}

TEST(Cuda, ShapeOpsStayViewsAndTransposeConcatMove) {
  SKIP_WITHOUT_CUDA();
  ModelBuilder m(17);
  m.input("x", 1, {2, 3, 4})
      .initializer_i64("shape", {2}, {6, 4})
      .output_any("y", 1)
      .node("Transpose", {"x"}, {"t"},
            [](onnx::NodeProto& n) {
              ModelBuilder::set_ints(n, "perm", {2, 0, 1});
            })
      .node("Reshape", {"t", "shape"}, {"r"})
      .node("Concat", {"r", "r"}, {"y"},
            [](onnx::NodeProto& n) { ModelBuilder::set_int(n, "axis", 1); });
  expect_same_on_cuda(m.bytes(), {{"x", random_tensor({2, 3, 4}, 14)}}, 0.f);
}

TEST(Cuda, GatherLooksUpRowsAndRefusesIndicesOutOfRange) {
  SKIP_WITHOUT_CUDA();
  ModelBuilder m(17);
  m.input("ids", 7, {2, 5})
      .initializer("table", {11, 3}, std::vector<float>(33, 0.f))
      .output_any("y", 1)
      .node("Gather", {"table", "ids"}, {"y"});
  auto& table = *m.proto().mutable_graph()->mutable_initializer(0);
  for (int i = 0; i < 33; ++i) table.set_float_data(i, static_cast<float>(i));
  const std::string bytes = m.bytes();
  const Tensor ids = Tensor::from<int64_t>({0, 10, -1, 3, 3, 7, 2, 1, -11, 5}, {2, 5});
  Session cpu = Session::from_bytes(bytes.data(), bytes.size());
  Session gpu = Session::from_bytes(bytes.data(), bytes.size(), {.device = "cuda:0"});
  const Tensor want = cpu.run({{"ids", ids}})[0].tensor();
  const Tensor got = gpu.run({{"ids", ids}})[0].tensor();
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < want.numel(); ++i)
    EXPECT_EQ(got.data<float>()[i], want.data<float>()[i]) << i;
  EXPECT_THROW(gpu.run({{"ids", Tensor::from<int64_t>({0, 11, 0, 0, 0, 0, 0, 0, 0, 0}, {2, 5})}}),
               Error);
}

TEST(Cuda, ReductionsOverAnyAxesMatchTheCpu) {
  SKIP_WITHOUT_CUDA();
  // Non-adjacent axes, kept or dropped dims, and all axes (no axes input). Inputs in [0.5, 1.5]
  // keep LogSum's argument positive and Prod's 105 factors finite. fp32 sums in another order:
  // 1e-4 of the largest output.
  const Tensor x = random_tensor({3, 5, 7, 2}, 21, 0.5f, 1.5f);
  for (const char* op :
       {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare",
        "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"})
    for (int keepdims : {0, 1})
      for (bool all_axes : {false, true}) {
        ModelBuilder m(18, 10);
        m.input("x", 1, {3, 5, 7, 2}).output_any("y", 1);
        std::vector<std::string> ins = {"x"};
        if (!all_axes) {
          m.initializer_i64("axes", {2}, {1, -1});
          ins.push_back("axes");
        }
        m.node(op, ins, {"y"}, [&](auto& n) { ModelBuilder::set_int(n, "keepdims", keepdims); });
        SCOPED_TRACE(std::string(op) + (keepdims ? " keepdims" : "") + (all_axes ? " all" : ""));
        expect_same_on_cuda(m.bytes(), {{"x", x}}, 1e-4f);
      }
}

TEST(Cuda, WhereExpandAndSliceMatchTheCpu) {
  SKIP_WITHOUT_CUDA();
  Tensor cond = Tensor::empty(DType::Bool, {1, 6});
  for (int64_t i = 0; i < 6; ++i) cond.data<bool>()[i] = i % 3 != 1;
  ModelBuilder where(17);
  where.input("c", 9, {1, 6}).input("a", 1, {5, 6}).input("b", 1, {5, 1}).output_any("y", 1);
  where.node("Where", {"c", "a", "b"}, {"y"});
  expect_same_on_cuda(
      where.bytes(),
      {{"c", cond}, {"a", random_tensor({5, 6}, 31)}, {"b", random_tensor({5, 1}, 32)}}, 0.f);

  ModelBuilder expand(17);
  expand.input("x", 1, {3, 1}).output_any("y", 1).initializer_i64("shape", {3}, {2, 1, 4});
  expand.node("Expand", {"x", "shape"}, {"y"});
  expect_same_on_cuda(expand.bytes(), {{"x", random_tensor({3, 1}, 33)}}, 0.f);

  // Negative step on one axis, a clamped end on another, an untouched middle axis.
  ModelBuilder slice(17);
  slice.input("x", 1, {4, 5, 9}).output_any("y", 1);
  slice.initializer_i64("starts", {2}, {-1, 1})
      .initializer_i64("ends", {2}, {-100, 1000})
      .initializer_i64("axes", {2}, {2, 0})
      .initializer_i64("steps", {2}, {-2, 2});
  slice.node("Slice", {"x", "starts", "ends", "axes", "steps"}, {"y"});
  expect_same_on_cuda(slice.bytes(), {{"x", random_tensor({4, 5, 9}, 34)}}, 0.f);
}

TEST(Cuda, OpsWithoutCudaKernelsFallBackToTheHost) {
  SKIP_WITHOUT_CUDA();
  ModelBuilder m(17);
  m.input("x", 1, {5, 6})
      .output_any("y", 1)
      .node("Relu", {"x"}, {"r"})
      .node("Round", {"r"}, {"q"})  // no CUDA kernel: host, with copies either side
      .node("Sigmoid", {"q"}, {"y"});
  expect_same_on_cuda(m.bytes(), {{"x", random_tensor({5, 6}, 15, -3, 3)}}, 1e-6f);
}

}  // namespace
}  // namespace volt
