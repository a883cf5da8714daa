// lower_quantized: every quantized form of a convolution or product becomes one QuantizedConv /
// QuantizedMatMul on oneDNN's int8 primitives. Each form is checked for the rewrite it makes and
// against the unoptimized graph (level 0: the ONNX reference kernels, exact integer loops):
// integer accumulators must be equal; 8-bit outputs may differ by one step where the two
// requantize a tie differently (oneDNN scales in float32, the reference in double); float
// outputs agree to float32 rounding of the rescale (a few ulps of the output's scale).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "loaders/loader.hpp"
#include "model_builder.hpp"
#include "operators/common/cpu_isa.hpp"
#include "runtime/passes/passes.hpp"
#include "test_options.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;
using testing::test_options;
constexpr int kFloat = 1, kUInt8 = 2, kInt8 = 3, kInt32 = 6;

std::vector<int32_t> ints(size_t n, int lo, int hi, std::mt19937& rng) {
  std::uniform_int_distribution<int> u(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}
std::vector<float> floats(size_t n, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}
Tensor u8_tensor(const Shape& shape, std::mt19937& rng) {
  Tensor t = Tensor::empty(DType::UInt8, shape);
  const auto v = ints(static_cast<size_t>(t.numel()), 0, 255, rng);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint8_t>()[i] = static_cast<uint8_t>(v[i]);
  t.data<uint8_t>()[0] = 0;  // both ends of the range
  t.data<uint8_t>()[1] = 255;
  return t;
}
Tensor float_tensor(const Shape& shape, std::mt19937& rng, float lo = -2, float hi = 3) {
  Tensor t = Tensor::empty(DType::Float, shape);
  const auto v = floats(static_cast<size_t>(t.numel()), lo, hi, rng);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

int count(const Graph& g, const std::string& op) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.op_type == op;
  return n;
}
Graph lowered(const std::string& bytes) {
  return lower_quantized(load_model_from_bytes(bytes.data(), bytes.size()).graph);
}

std::pair<Tensor, Tensor> unoptimized_and_optimized(const std::string& bytes,
                                                    const NamedValues& feeds) {
  Session plain =
      Session::from_bytes(bytes.data(), bytes.size(), test_options({.optimization_level = 0}));
  Session opt = Session::from_bytes(bytes.data(), bytes.size(), test_options());
  return {plain.run(feeds)[0].tensor(), opt.run(feeds)[0].tensor()};
}

void expect_equal_integers(const Tensor& want, const Tensor& got) {
  ASSERT_EQ(want.shape(), got.shape());
  ASSERT_EQ(want.dtype(), got.dtype());
  ASSERT_EQ(want.nbytes(), got.nbytes());
  for (int64_t i = 0; i < want.numel(); ++i)
    ASSERT_EQ(want.data<int32_t>()[i], got.data<int32_t>()[i]) << "element " << i;
}

// 8-bit outputs: within one step, and equal almost everywhere (ties are rare).
void expect_within_one_step(const Tensor& want, const Tensor& got) {
  ASSERT_EQ(want.shape(), got.shape());
  ASSERT_EQ(want.dtype(), DType::UInt8);
  int64_t off = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const int d = std::abs(int{want.data<uint8_t>()[i]} - int{got.data<uint8_t>()[i]});
    ASSERT_LE(d, 1) << "element " << i;
    off += d;
  }
  EXPECT_LE(off, want.numel() / 100 + 1);
}

void expect_close(const Tensor& want, const Tensor& got, double rtol) {
  ASSERT_EQ(want.shape(), got.shape());
  double scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i)
    scale = std::max(scale, double{std::abs(want.data<float>()[i])});
  ASSERT_GT(scale, 0);
  for (int64_t i = 0; i < want.numel(); ++i)
    ASSERT_NEAR(want.data<float>()[i], got.data<float>()[i], rtol * scale) << "element " << i;
}

// Every QuantizedConv ran on oneDNN's primitive, not the reference loop; on a CPU whose int8
// kernels do not accumulate exactly (no VNNI), every one ran the exact loop and said why.
void expect_convolutions_on_onednn(const std::string& bytes, const NamedValues& feeds) {
  Session s = Session::from_bytes(bytes.data(), bytes.size(), test_options());
  RunProfile profile;
  s.run(feeds, {}, {.profile = &profile});
  const std::string expected =
      cpu_has_exact_int8_dot() ? "" : "no VNNI on this CPU, and weights beyond 7 bits";
  for (const ProfileEvent& e : profile.events) {
    if (e.op == "QuantizedConv") {
      EXPECT_EQ(e.reference, expected) << e.node;
    }
  }
}

void conv_geometry(onnx::NodeProto& n) {
  ModelBuilder::set_int(n, "group", 2);
  ModelBuilder::set_ints(n, "pads", {1, 0, 2, 1});
  ModelBuilder::set_ints(n, "strides", {2, 1});
  ModelBuilder::set_ints(n, "dilations", {1, 2});
}

// Odd channels per group (3 in, 5 out), padding, strides and dilations; an asymmetric x zero
// point; per-channel weight zero points; inputs at 0 and 255.
TEST(QuantizedLowering, ConvIntegerAccumulatesExactlyOnOneDnn) {
  std::mt19937 rng(1);
  ModelBuilder mb(13);
  mb.input("x", kUInt8, {2, 6, 9, 11}).output_any("y", kInt32);
  mb.initializer_int("w", kInt8, {10, 3, 3, 2}, ints(180, -100, 100, rng));
  mb.initializer_int("xz", kUInt8, {}, {37});
  mb.initializer_int("wz", kInt8, {10}, ints(10, -20, 20, rng));
  mb.node("ConvInteger", {"x", "w", "xz", "wz"}, {"y"}, conv_geometry);
  const std::string bytes = mb.bytes();
  const Graph g = lowered(bytes);
  EXPECT_EQ(count(g, "QuantizedConv"), 1);
  EXPECT_EQ(count(g, "ConvInteger"), 0);
  auto [want, got] = unoptimized_and_optimized(bytes, {{"x", u8_tensor({2, 6, 9, 11}, rng)}});
  expect_equal_integers(want, got);
}

// Weights within [-64, 64] (7 bits, as quantizers write them for CPUs without VNNI) run on
// oneDNN's int8 primitives on every CPU: its older kernels' 16-bit pair sums stay below
// 2 * 255 * 64. Inputs of 255 next to weights of +-64 reach that bound; the integers must be
// the ONNX kernels' exactly.
TEST(QuantizedLowering, SevenBitWeightsRunOnOneDnnEverywhere) {
  std::mt19937 rng(7);
  auto saturating = [&](const Shape& shape) {
    Tensor t = u8_tensor(shape, rng);
    for (int64_t i = 0; i < t.numel(); i += 2) t.data<uint8_t>()[i] = 255;
    return t;
  };
  auto seven_bits = [&](size_t n) {
    std::vector<int> v = ints(n, -64, 64, rng);
    for (size_t i = 0; i < n; i += 3) v[i] = i % 2 ? -64 : 64;
    return v;
  };
  {
    ModelBuilder mb(13);
    mb.input("x", kUInt8, {1, 16, 7, 7}).output_any("y", kInt32);
    mb.initializer_int("w", kInt8, {8, 16, 3, 3}, seven_bits(8 * 16 * 9));
    mb.node("ConvInteger", {"x", "w"}, {"y"}, [](auto& n) {
      ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
    });
    const std::string bytes = mb.bytes();
    const NamedValues feeds = {{"x", saturating({1, 16, 7, 7})}};
    auto [want, got] = unoptimized_and_optimized(bytes, feeds);
    expect_equal_integers(want, got);
    Session s = Session::from_bytes(bytes.data(), bytes.size(), test_options());
    RunProfile profile;
    s.run(feeds, {}, {.profile = &profile});
    int quantized = 0;
    for (const ProfileEvent& e : profile.events)
      if (e.op == "QuantizedConv") {
        ++quantized;
        EXPECT_EQ(e.reference, "") << e.node;
      }
    EXPECT_EQ(quantized, 1);
  }
  {
    ModelBuilder mb(13);
    mb.input("a", kUInt8, {5, 32}).output_any("y", kInt32);
    mb.initializer_int("b", kInt8, {32, 6}, seven_bits(32 * 6));
    mb.node("MatMulInteger", {"a", "b"}, {"y"});
    const std::string bytes = mb.bytes();
    const NamedValues feeds = {{"a", saturating({5, 32})}};
    auto [want, got] = unoptimized_and_optimized(bytes, feeds);
    expect_equal_integers(want, got);
    Session s = Session::from_bytes(bytes.data(), bytes.size(), test_options());
    RunProfile profile;
    s.run(feeds, {}, {.profile = &profile});
    for (const ProfileEvent& e : profile.events) {
      if (e.op == "QuantizedMatMul") {
        EXPECT_EQ(e.reference, "") << e.node;
      }
    }
  }
}

// uint8 weights with zero point 128 shift into int8 exactly; with zero point 3 they cannot
// (255 - 3 is no int8) and the ONNX kernel keeps the node, with the same answer.
TEST(QuantizedLowering, Uint8WeightsShiftIntoInt8OrStayWithTheOnnxKernel) {
  for (int zp : {128, 3}) {
    std::mt19937 rng(2);
    ModelBuilder mb(13);
    mb.input("x", kUInt8, {1, 4, 7, 7}).output_any("y", kInt32);
    mb.initializer_int("w", kUInt8, {5, 4, 3, 3}, ints(180, 0, 255, rng));
    mb.initializer_int("wz", kUInt8, {}, {zp});
    mb.node("ConvInteger", {"x", "w", "", "wz"}, {"y"});
    const std::string bytes = mb.bytes();
    EXPECT_EQ(count(lowered(bytes), "QuantizedConv"), zp == 128 ? 1 : 0) << zp;
    auto [want, got] = unoptimized_and_optimized(bytes, {{"x", u8_tensor({1, 4, 7, 7}, rng)}});
    expect_equal_integers(want, got);
  }
}

// A per-row A zero point (MatMulInteger allows one) is not what the int8 primitives take: the
// ONNX kernel keeps the node, with the same integers.
TEST(QuantizedLowering, PerRowZeroPointKeepsTheOnnxKernel) {
  std::mt19937 rng(10);
  ModelBuilder mb(13);
  mb.input("a", kUInt8, {3, 8}).input("azp", kUInt8, {3}).output_any("y", kInt32);
  mb.initializer_int("b", kInt8, {8, 5}, ints(40, -100, 100, rng));
  mb.node("MatMulInteger", {"a", "b", "azp"}, {"y"});
  const std::string bytes = mb.bytes();
  EXPECT_EQ(count(lowered(bytes), "QuantizedMatMul"), 0);
  Tensor azp = Tensor::empty(DType::UInt8, {3});
  for (int i = 0; i < 3; ++i) azp.data<uint8_t>()[i] = static_cast<uint8_t>(10 * i + 1);
  auto [want, got] =
      unoptimized_and_optimized(bytes, {{"a", u8_tensor({3, 8}, rng)}, {"azp", azp}});
  expect_equal_integers(want, got);
}

// Dynamic quantization as quantizers write it: DynamicQuantizeLinear, ConvInteger, Cast, Mul by
// (x scale · per-channel w scale), Add the bias, Relu: one node.
TEST(QuantizedLowering, DynamicConvChainFoldsIntoOneNode) {
  std::mt19937 rng(3);
  ModelBuilder mb(13);
  mb.input("x", kFloat, {2, 6, 9, 11}).output_any("y", kFloat);
  mb.initializer_int("w", kInt8, {10, 3, 3, 2}, ints(180, -127, 127, rng));
  mb.initializer("ws", {1, 10, 1, 1}, floats(10, 0.001f, 0.01f, rng));
  mb.initializer("b", {1, 10, 1, 1}, floats(10, -0.5f, 0.5f, rng));
  mb.node("DynamicQuantizeLinear", {"x"}, {"xq", "xs", "xz"});
  mb.node("ConvInteger", {"xq", "w", "xz"}, {"acc"}, conv_geometry);
  mb.node("Cast", {"acc"}, {"accf"},
          [](onnx::NodeProto& n) { ModelBuilder::set_int(n, "to", kFloat); });
  mb.node("Mul", {"xs", "ws"}, {"scale"});
  mb.node("Mul", {"accf", "scale"}, {"scaled"});
  mb.node("Add", {"scaled", "b"}, {"biased"});
  mb.node("Relu", {"biased"}, {"y"});
  const std::string bytes = mb.bytes();
  const Graph g = lowered(bytes);
  EXPECT_EQ(count(g, "QuantizedConv"), 1);
  EXPECT_EQ(count(g, "Cast") + count(g, "Add") + count(g, "Relu"), 0);
  auto [want, got] = unoptimized_and_optimized(bytes, {{"x", float_tensor({2, 6, 9, 11}, rng)}});
  expect_close(want, got, 1e-5);
}

// MatMulInteger as dynamically quantized transformers have it: 3-D activations, per-column
// weight scales, a bias.
TEST(QuantizedLowering, DynamicMatMulChainFoldsIntoOneNode) {
  std::mt19937 rng(4);
  ModelBuilder mb(13);
  mb.input("x", kFloat, {2, 5, 24}).output_any("y", kFloat);
  mb.initializer_int("w", kInt8, {24, 17}, ints(24 * 17, -127, 127, rng));
  mb.initializer("ws", {17}, floats(17, 0.001f, 0.01f, rng));
  mb.initializer("b", {17}, floats(17, -0.5f, 0.5f, rng));
  mb.node("DynamicQuantizeLinear", {"x"}, {"xq", "xs", "xz"});
  mb.node("MatMulInteger", {"xq", "w", "xz"}, {"acc"});
  mb.node("Cast", {"acc"}, {"accf"},
          [](onnx::NodeProto& n) { ModelBuilder::set_int(n, "to", kFloat); });
  mb.node("Mul", {"xs", "ws"}, {"scale"});
  mb.node("Mul", {"accf", "scale"}, {"scaled"});
  mb.node("Add", {"scaled", "b"}, {"y"});
  const std::string bytes = mb.bytes();
  const Graph g = lowered(bytes);
  EXPECT_EQ(count(g, "QuantizedMatMul"), 1);
  EXPECT_EQ(count(g, "MatMulInteger") + count(g, "Cast") + count(g, "Add"), 0);
  auto [want, got] = unoptimized_and_optimized(bytes, {{"x", float_tensor({2, 5, 24}, rng)}});
  expect_close(want, got, 1e-5);
}

TEST(QuantizedLowering, QLinearConvAndMatMulRequantizeWithinOneStep) {
  std::mt19937 rng(5);
  {
    ModelBuilder mb(13);
    mb.input("x", kUInt8, {2, 6, 9, 11}).output_any("y", kUInt8);
    mb.initializer("xs", {}, {0.02f}).initializer_int("xz", kUInt8, {}, {120});
    mb.initializer_int("w", kInt8, {10, 3, 3, 2}, ints(180, -127, 127, rng));
    mb.initializer("ws", {10}, floats(10, 0.002f, 0.01f, rng))
        .initializer_int("wz", kInt8, {10}, std::vector<int32_t>(10, 0));
    mb.initializer("ys", {}, {0.05f}).initializer_int("yz", kUInt8, {}, {100});
    mb.initializer_int("b", kInt32, {10}, ints(10, -5000, 5000, rng));
    mb.node("QLinearConv", {"x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"}, {"y"},
            conv_geometry);
    const std::string bytes = mb.bytes();
    EXPECT_EQ(count(lowered(bytes), "QuantizedConv"), 1);
    auto [want, got] = unoptimized_and_optimized(bytes, {{"x", u8_tensor({2, 6, 9, 11}, rng)}});
    expect_within_one_step(want, got);
  }
  {
    ModelBuilder mb(13);
    mb.input("a", kUInt8, {3, 40}).output_any("y", kUInt8);
    mb.initializer("as", {}, {0.02f}).initializer_int("az", kUInt8, {}, {7});
    mb.initializer_int("b", kInt8, {40, 9}, ints(360, -127, 127, rng));
    mb.initializer("bs", {9}, floats(9, 0.002f, 0.01f, rng)).initializer_int("bz", kInt8, {}, {0});
    mb.initializer("ys", {}, {0.1f}).initializer_int("yz", kUInt8, {}, {128});
    mb.node("QLinearMatMul", {"a", "as", "az", "b", "bs", "bz", "ys", "yz"}, {"y"});
    const std::string bytes = mb.bytes();
    EXPECT_EQ(count(lowered(bytes), "QuantizedMatMul"), 1);
    auto [want, got] = unoptimized_and_optimized(bytes, {{"a", u8_tensor({3, 40}, rng)}});
    expect_within_one_step(want, got);
  }
}

// QDQ, as static quantizers write it: the quantized activation flows from one layer into the
// next without a float copy; Relu and the QuantizeLinear fold into the first layer.
TEST(QuantizedLowering, QdqLayersKeepActivationsIn8Bits) {
  std::mt19937 rng(6);
  ModelBuilder mb(13);
  mb.input("x", kFloat, {1, 4, 8, 8}).output_any("y", kUInt8);
  mb.initializer("s_in", {}, {0.02f}).initializer_int("z_in", kUInt8, {}, {100});
  mb.initializer_int("w", kInt8, {6, 4, 3, 3}, ints(216, -127, 127, rng));
  mb.initializer("ws", {6}, floats(6, 0.002f, 0.01f, rng))
      .initializer_int("wz", kInt8, {6}, std::vector<int32_t>(6, 0));
  mb.initializer("b", {6}, floats(6, -0.3f, 0.3f, rng));
  mb.initializer("s_out", {}, {0.03f}).initializer_int("z_out", kUInt8, {}, {0});
  mb.node("QuantizeLinear", {"x", "s_in", "z_in"}, {"xq"});
  mb.node("DequantizeLinear", {"xq", "s_in", "z_in"}, {"xd"});
  mb.node("DequantizeLinear", {"w", "ws", "wz"}, {"wd"},
          [](onnx::NodeProto& n) { ModelBuilder::set_int(n, "axis", 0); });
  mb.node("Conv", {"xd", "wd", "b"}, {"c"}, [](onnx::NodeProto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  mb.node("Relu", {"c"}, {"r"});
  mb.node("QuantizeLinear", {"r", "s_out", "z_out"}, {"y"});
  const std::string bytes = mb.bytes();
  const Graph g = lowered(bytes);
  EXPECT_EQ(count(g, "QuantizedConv"), 1);
  EXPECT_EQ(count(g, "Conv") + count(g, "Relu"), 0);
  EXPECT_EQ(count(g, "QuantizeLinear"), 1);  // the input's
  auto [want, got] =
      unoptimized_and_optimized(bytes, {{"x", float_tensor({1, 4, 8, 8}, rng, -1, 4)}});
  expect_within_one_step(want, got);
}

// A residual block in QDQ form: DequantizeLinear(shortcut) added to the convolution, Relu,
// QuantizeLinear. The convolution takes the 8-bit shortcut (another layer's output) as it is,
// its scale and asymmetric zero point in the post-ops, and writes the block's 8 bits; with no
// QuantizeLinear after it, float. Both against the unfused graph's reference kernels.
TEST(QuantizedLowering, QdqResidualBlockReadsAndWrites8Bits) {
  for (bool quantized_out : {true, false}) {
    SCOPED_TRACE(quantized_out ? "uint8 out" : "float out");
    std::mt19937 rng(11);
    ModelBuilder mb(13);
    mb.input("x", kFloat, {2, 5, 7, 6}).output_any("y", quantized_out ? kUInt8 : kFloat);
    mb.initializer("s_in", {}, {0.02f}).initializer_int("z_in", kUInt8, {}, {100});
    mb.initializer("s_r", {}, {0.05f}).initializer_int("z_r", kUInt8, {}, {37});
    for (const char* w : {"w0", "w"})
      mb.initializer_int(w, kInt8, {6, 5, 3, 3}, ints(270, -127, 127, rng));
    mb.initializer("ws", {6}, floats(6, 0.002f, 0.01f, rng));
    mb.initializer("b", {6}, floats(6, -0.3f, 0.3f, rng));
    mb.initializer("s_out", {}, {0.06f}).initializer_int("z_out", kUInt8, {}, {0});
    auto pads = [](onnx::NodeProto& n) { ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1}); };
    auto per_channel = [](onnx::NodeProto& n) { ModelBuilder::set_int(n, "axis", 0); };
    mb.node("QuantizeLinear", {"x", "s_in", "z_in"}, {"xq"});
    mb.node("DequantizeLinear", {"xq", "s_in", "z_in"}, {"xd"});
    mb.node("DequantizeLinear", {"w0", "ws"}, {"w0d"}, per_channel);
    mb.node("DequantizeLinear", {"w", "ws"}, {"wd"}, per_channel);
    // The shortcut: a layer writing 8 bits with an asymmetric zero point.
    mb.node("Conv", {"xd", "w0d"}, {"c0"}, pads);
    mb.node("QuantizeLinear", {"c0", "s_r", "z_r"}, {"shortcut"});
    mb.node("DequantizeLinear", {"shortcut", "s_r", "z_r"}, {"rd"});
    mb.node("Conv", {"xd", "wd", "b"}, {"c"}, pads);
    mb.node("Add", {"c", "rd"}, {"sum"});
    mb.node("Relu", {"sum"}, {quantized_out ? "r" : "y"});
    if (quantized_out) mb.node("QuantizeLinear", {"r", "s_out", "z_out"}, {"y"});
    const std::string bytes = mb.bytes();
    const Graph g = lowered(bytes);
    EXPECT_EQ(count(g, "QuantizedConv"), 2);
    EXPECT_EQ(count(g, "Add") + count(g, "Relu") + count(g, "QuantizedAdd"), 0);
    int with_residual = 0;
    for (const Node& n : g.nodes)
      if (n.op_type == "QuantizedConv" && n.inputs.size() == 7) {
        ++with_residual;
        EXPECT_EQ(n.inputs[6], "shortcut");  // the 8-bit values, not a float copy
      }
    EXPECT_EQ(with_residual, 1);
    const NamedValues feeds = {{"x", float_tensor({2, 5, 7, 6}, rng, -1, 4)}};
    auto [want, got] = unoptimized_and_optimized(bytes, feeds);
    if (quantized_out) {
      expect_within_one_step(want, got);
    } else {
      expect_close(want, got, 1e-5);
    }
    expect_convolutions_on_onednn(bytes, feeds);  // an 8-bit residual post-op too
  }
}

// Constant zero points other than zero leave oneDNN's primitive (which takes its slower kernels
// for them): X's as zx · Σ W in the bias of an unpadded convolution, Y's as a shift after the
// last post-op. A 1x1 convolution with strides and groups, both zero points asymmetric, and a
// padded 3x3 one (X's zero point stays in the primitive there), against the unfused graph.
TEST(QuantizedLowering, ConstantZeroPointsFoldOutOfThePrimitive) {
  for (int64_t k : {1, 3}) {
    SCOPED_TRACE("kernel " + std::to_string(k));
    std::mt19937 rng(13);
    ModelBuilder mb(13);
    mb.input("x", kFloat, {2, 6, 9, 8}).output_any("y", kUInt8);
    mb.initializer("s_in", {}, {0.0213f}).initializer_int("z_in", kUInt8, {}, {100});
    mb.initializer_int("w", kInt8, {8, 3, k, k},
                       ints(static_cast<size_t>(24 * k * k), -127, 127, rng));
    mb.initializer("ws", {8}, floats(8, 0.002f, 0.01f, rng));
    mb.initializer("b", {8}, floats(8, -0.3f, 0.3f, rng));
    mb.initializer("s_out", {}, {0.0371f}).initializer_int("z_out", kUInt8, {}, {77});
    mb.node("QuantizeLinear", {"x", "s_in", "z_in"}, {"xq"});
    mb.node("DequantizeLinear", {"xq", "s_in", "z_in"}, {"xd"});
    mb.node("DequantizeLinear", {"w", "ws"}, {"wd"},
            [](onnx::NodeProto& n) { ModelBuilder::set_int(n, "axis", 0); });
    mb.node("Conv", {"xd", "wd", "b"}, {"c"}, [k](onnx::NodeProto& n) {
      ModelBuilder::set_int(n, "group", 2);
      ModelBuilder::set_ints(n, "strides", {2, 1});
      if (k == 3) ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
    });
    mb.node("QuantizeLinear", {"c", "s_out", "z_out"}, {"y"});
    const std::string bytes = mb.bytes();
    const NamedValues feeds = {{"x", float_tensor({2, 6, 9, 8}, rng, -1, 4)}};
    auto [want, got] = unoptimized_and_optimized(bytes, feeds);
    expect_within_one_step(want, got);
    expect_convolutions_on_onednn(bytes, feeds);
  }
}

// What static quantization leaves between layers (a residual Add, an activation between
// QuantizeLinear/DequantizeLinear pairs) runs on the 8-bit values with the float nodes' own
// arithmetic: the same bits as the unfused graph. B broadcasts over A; the activation after the
// sum becomes a table on the sum's 8 bits; another activation between a pair stands alone.
TEST(QuantizedLowering, QdqAddAndActivationRunOn8BitValuesBitExactly) {
  std::mt19937 rng(9);
  ModelBuilder mb(13);
  mb.input("x", kFloat, {2, 3, 5, 7})
      .input("r", kFloat, {3, 1, 7})
      .output_any("y", kUInt8)
      .output_any("y2", kInt8);
  mb.initializer("sx", {}, {0.03f}).initializer_int("zx", kUInt8, {}, {90});
  mb.initializer("sr", {}, {0.05f}).initializer_int("zr", kInt8, {}, {-4});
  mb.initializer("sa", {}, {0.04f}).initializer_int("za", kUInt8, {}, {128});
  mb.initializer("sy", {}, {0.02f}).initializer_int("zy", kUInt8, {}, {3});
  mb.node("QuantizeLinear", {"x", "sx", "zx"}, {"xq"});
  mb.node("DequantizeLinear", {"xq", "sx", "zx"}, {"xd"});
  mb.node("QuantizeLinear", {"r", "sr", "zr"}, {"rq"});
  mb.node("DequantizeLinear", {"rq", "sr", "zr"}, {"rd"});
  mb.node("Add", {"xd", "rd"}, {"sum"});
  mb.node("QuantizeLinear", {"sum", "sa", "za"}, {"sq"});
  mb.node("DequantizeLinear", {"sq", "sa", "za"}, {"sd"});
  mb.node("Relu", {"sd"}, {"relu"});
  mb.node("QuantizeLinear", {"relu", "sy", "zy"}, {"y"});
  mb.initializer("s2", {}, {0.01f}).initializer_int("z2", kInt8, {}, {-20});
  mb.node("LeakyRelu", {"rd"}, {"leaky"});
  mb.node("QuantizeLinear", {"leaky", "s2", "z2"}, {"y2"});
  const std::string bytes = mb.bytes();
  const Graph g = lowered(bytes);
  EXPECT_EQ(count(g, "QuantizedAdd"), 1);
  EXPECT_EQ(count(g, "QuantizedUnary"), 1);  // the LeakyRelu's; the Relu is in the Add
  EXPECT_EQ(count(g, "Add") + count(g, "Relu"), 0);
  const NamedValues feeds = {{"x", float_tensor({2, 3, 5, 7}, rng, -3, 5)},
                             {"r", float_tensor({3, 1, 7}, rng, -6, 6)}};
  Session plain =
      Session::from_bytes(bytes.data(), bytes.size(), test_options({.optimization_level = 0}));
  Session opt = Session::from_bytes(bytes.data(), bytes.size(), test_options());
  const auto want = plain.run(feeds), got = opt.run(feeds);
  for (size_t k = 0; k < 2; ++k) {
    const Tensor &a = want[k].tensor(), &b = got[k].tensor();
    ASSERT_EQ(a.shape(), b.shape());
    ASSERT_EQ(a.dtype(), b.dtype());
    ASSERT_EQ(0, std::memcmp(a.raw(), b.raw(), a.nbytes())) << "output " << k;
  }
}

// The same-shape residual Add of QDQ ResNets, for every 8-bit signedness of the operands and the
// sum, with no activation, a Relu, or a Relu and a second Quantize/Dequantize pair with Relu or
// LeakyRelu after it (the second stage): the same bits as the unfused graph. 7·11·6 elements is
// not a multiple of the 64 the vector loop takes at once, so its tail runs too; values reach
// past the sum's range on both sides, so saturation is exercised.
TEST(QuantizedLowering, QdqSameShapeAddIsBitExactForEverySignedness) {
  std::mt19937 rng(10);
  const Shape shape = {2, 7, 11, 6};
  int configurations = 0;
  for (int types = 0; types < 8; ++types)
    for (const std::string then : {"", "Relu", "LeakyRelu", "none"}) {
      const auto t = [&](int bit) { return (types >> bit) & 1 ? kInt8 : kUInt8; };
      const auto zp = [&](int bit, int u, int s) { return (types >> bit) & 1 ? s : u; };
      ModelBuilder mb(13);
      mb.input("x", kFloat, shape)
          .input("r", kFloat, shape)
          .output_any("y", then.empty() || then == "none" ? t(2) : kUInt8);
      mb.initializer("sx", {}, {0.03f}).initializer_int("zx", t(0), {}, {zp(0, 90, -7)});
      mb.initializer("sr", {}, {0.05f}).initializer_int("zr", t(1), {}, {zp(1, 128, 5)});
      mb.initializer("sa", {}, {0.045f}).initializer_int("za", t(2), {}, {zp(2, 20, -100)});
      mb.node("QuantizeLinear", {"x", "sx", "zx"}, {"xq"});
      mb.node("DequantizeLinear", {"xq", "sx", "zx"}, {"xd"});
      mb.node("QuantizeLinear", {"r", "sr", "zr"}, {"rq"});
      mb.node("DequantizeLinear", {"rq", "sr", "zr"}, {"rd"});
      mb.node("Add", {"xd", "rd"}, {"sum"});
      std::string last = "sum";
      if (then != "none") {
        mb.node("Relu", {"sum"}, {"relu"});
        last = "relu";
      }
      if (then.empty() || then == "none") {
        mb.node("QuantizeLinear", {last, "sa", "za"}, {"y"});
      } else {
        mb.initializer("sy", {}, {0.02f}).initializer_int("zy", kUInt8, {}, {3});
        mb.node("QuantizeLinear", {last, "sa", "za"}, {"sq"});
        mb.node("DequantizeLinear", {"sq", "sa", "za"}, {"sd"});
        mb.node(then, {"sd"}, {"act"});
        mb.node("QuantizeLinear", {"act", "sy", "zy"}, {"y"});
      }
      const std::string bytes = mb.bytes();
      const Graph g = lowered(bytes);
      ASSERT_EQ(count(g, "QuantizedAdd"), 1) << types << " " << then;
      ASSERT_EQ(count(g, "QuantizedUnary") + count(g, "Add") + count(g, "Relu"), 0)
          << types << " " << then;
      const NamedValues feeds = {{"x", float_tensor(shape, rng, -6, 6)},
                                 {"r", float_tensor(shape, rng, -9, 9)}};
      Session plain =
          Session::from_bytes(bytes.data(), bytes.size(), test_options({.optimization_level = 0}));
      Session opt = Session::from_bytes(bytes.data(), bytes.size(), test_options());
      const Tensor want = plain.run(feeds)[0].tensor(), got = opt.run(feeds)[0].tensor();
      ASSERT_EQ(want.dtype(), got.dtype());
      ASSERT_EQ(0, std::memcmp(want.raw(), got.raw(), want.nbytes())) << types << " " << then;
      ++configurations;
    }
  EXPECT_EQ(configurations, 32);
}

// Gemm with transB (torch's Linear) in QDQ form, float out; a weight-only DequantizeLinear
// feeding a float MatMul folds into a float constant.
TEST(QuantizedLowering, QdqGemmLowersAndWeightOnlyDequantizeFolds) {
  std::mt19937 rng(7);
  ModelBuilder mb(13);
  mb.input("x", kFloat, {3, 16}).output_any("y", kFloat);
  mb.initializer("s_in", {}, {0.02f}).initializer_int("z_in", kUInt8, {}, {128});
  mb.initializer_int("w", kInt8, {8, 16}, ints(128, -127, 127, rng));
  mb.initializer("ws", {}, {0.01f});
  mb.initializer("b", {8}, floats(8, -0.3f, 0.3f, rng));
  mb.initializer_int("w2", kInt8, {8, 5}, ints(40, -127, 127, rng));
  mb.initializer("ws2", {}, {0.02f});
  mb.node("QuantizeLinear", {"x", "s_in", "z_in"}, {"xq"});
  mb.node("DequantizeLinear", {"xq", "s_in", "z_in"}, {"xd"});
  mb.node("DequantizeLinear", {"w", "ws"}, {"wd"});
  mb.node("Gemm", {"xd", "wd", "b"}, {"h"},
          [](onnx::NodeProto& n) { ModelBuilder::set_int(n, "transB", 1); });
  mb.node("DequantizeLinear", {"w2", "ws2"}, {"w2d"});
  mb.node("MatMul", {"h", "w2d"}, {"y"});
  const std::string bytes = mb.bytes();
  const Graph g = lowered(bytes);
  EXPECT_EQ(count(g, "QuantizedMatMul"), 1);
  EXPECT_EQ(count(g, "Gemm"), 0);
  EXPECT_EQ(count(g, "DequantizeLinear"), 2);  // x's and the Gemm weights', unread now
  EXPECT_TRUE(g.initializers.count("w2d"));
  auto [want, got] = unoptimized_and_optimized(bytes, {{"x", float_tensor({3, 16}, rng)}});
  expect_close(want, got, 1e-5);
}

// precision=int8 quantizes a float model at load: every Conv / MatMul / Gemm with constant
// weights runs on the int8 primitives, the rest in fp32, and the answer stays within the
// quantization error of fp32's. 8-bit activations over their range and 8-bit weights per
// channel give each layer a relative error of about 1/255 of its input range; through three
// layers of 16-64 channels that is about 1%, so 3% (the bound) leaves room without
// hiding a wrong scale, which is off by far more.
TEST(QuantizedLowering, PrecisionInt8QuantizesFloatLayersAtLoad) {
  std::mt19937 rng(8);
  ModelBuilder mb(13);
  mb.input("x", kFloat, {2, 3, 16, 16}).output_any("y", kFloat);
  mb.initializer("w1", {16, 3, 3, 3}, floats(432, -0.5f, 0.5f, rng))
      .initializer("b1", {16}, floats(16, -0.1f, 0.1f, rng));
  mb.initializer("w2", {16, 16, 3, 3}, floats(2304, -0.2f, 0.2f, rng));
  mb.initializer("wr", {16, 16, 3, 3}, floats(2304, -0.2f, 0.2f, rng));
  mb.initializer("w3", {16 * 8 * 8, 10}, floats(10240, -0.05f, 0.05f, rng));
  mb.initializer_i64("shape", {2}, {2, 16 * 8 * 8});
  mb.node("Conv", {"x", "w1", "b1"}, {"c1"}, [](onnx::NodeProto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  mb.node("Relu", {"c1"}, {"r1"});
  // A residual block: Conv -> Add(shortcut) -> Relu, which the int8 convolution takes in.
  mb.node("Conv", {"r1", "wr"}, {"cr"}, [](onnx::NodeProto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  mb.node("Add", {"cr", "r1"}, {"sum"});
  mb.node("Relu", {"sum"}, {"block"});
  mb.node("Conv", {"block", "w2"}, {"c2"}, [](onnx::NodeProto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
    ModelBuilder::set_ints(n, "strides", {2, 2});
  });
  mb.node("Relu", {"c2"}, {"r2"});
  mb.node("Reshape", {"r2", "shape"}, {"flat"});
  mb.node("MatMul", {"flat", "w3"}, {"y"});
  const std::string bytes = mb.bytes();
  const Graph g =
      lower_quantized(quantize_at_load(load_model_from_bytes(bytes.data(), bytes.size()).graph));
  EXPECT_EQ(count(g, "QuantizedConv"), 3);
  EXPECT_EQ(count(g, "QuantizedMatMul"), 1);
  EXPECT_EQ(count(g, "Conv") + count(g, "MatMul") + count(g, "ConvInteger") + count(g, "Add"), 0);
  const Tensor x = float_tensor({2, 3, 16, 16}, rng, 0, 1);
  Session fp32 = Session::from_bytes(bytes.data(), bytes.size(), test_options());
  Session int8 =
      Session::from_bytes(bytes.data(), bytes.size(), test_options({.precision = "int8"}));
  const Tensor a = fp32.run({{"x", x}})[0].tensor(), b = int8.run({{"x", x}})[0].tensor();
  ASSERT_EQ(a.shape(), b.shape());
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    diff += std::pow(double{a.data<float>()[i]} - b.data<float>()[i], 2);
    norm += std::pow(double{a.data<float>()[i]}, 2);
  }
  const double l2 = std::sqrt(diff / norm);
  EXPECT_LT(l2, 0.03);
  EXPECT_GT(l2, 0.0);  // it did quantize

  // With a calibration batch (another draw of the same distribution): fixed scales, the layers
  // chained in 8 bits (the first convolution writes uint8 for the second), the same bound.
  SessionOptions calibrated = test_options({.precision = "int8"});
  calibrated.calibration = {{"x", Value(float_tensor({2, 3, 16, 16}, rng, 0, 1))}};
  Session fixed = Session::from_bytes(bytes.data(), bytes.size(), calibrated);
  RunProfile profile;
  const Tensor c = fixed.run({{"x", x}}, {}, {.profile = &profile})[0].tensor();
  // Two quantizers: the input's and the product's (a Reshape stands before it); none between
  // the convolutions: the residual block reads its shortcut in 8 bits and writes the 8 bits the
  // next convolution reads.
  int quantizers = 0;
  for (const ProfileEvent& e : profile.events) quantizers += e.op == "QuantizeLinear";
  EXPECT_EQ(quantizers, 2);
  double cdiff = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    cdiff += std::pow(double{a.data<float>()[i]} - c.data<float>()[i], 2);
  EXPECT_LT(std::sqrt(cdiff / norm), 0.03);
  EXPECT_GT(std::sqrt(cdiff / norm), 0.0);
}

// Bad quantization parameters: a clear error naming the node, at session creation where they
// are constants.
TEST(QuantizedLowering, BadScalesAndZeroPointsAreErrorsNamingTheNode) {
  auto session_error = [](const std::string& bytes) -> std::string {
    try {
      Session s = Session::from_bytes(bytes.data(), bytes.size(), test_options());
      Tensor x = Tensor::empty(DType::Float, {4});
      std::fill(x.data<float>(), x.data<float>() + 4, 1.0f);
      s.run({{"x", x}});
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  for (float bad : {0.0f, -0.5f, std::nanf("")}) {
    ModelBuilder mb(13);
    mb.input("x", kFloat, {4}).output_any("y", kUInt8);
    mb.initializer("s", {}, {bad});
    mb.node("QuantizeLinear", {"x", "s"}, {"y"}, {}, "quantize_input");
    const std::string e = session_error(mb.bytes());
    EXPECT_NE(e.find("quantize_input"), std::string::npos) << e;
    EXPECT_NE(e.find("positive and finite"), std::string::npos) << e;
  }
  {  // int8 data, uint8 zero point
    ModelBuilder mb(13);
    mb.input("x", kFloat, {4}).output_any("y", kFloat);
    mb.initializer_int("q", kInt8, {4}, {1, 2, 3, 4});
    mb.initializer("s", {}, {0.1f}).initializer_int("z", kUInt8, {}, {3});
    mb.node("DequantizeLinear", {"q", "s", "z"}, {"d"}, {}, "dequantize_w");
    mb.node("Add", {"x", "d"}, {"y"});
    const std::string e = session_error(mb.bytes());
    EXPECT_NE(e.find("dequantize_w"), std::string::npos) << e;
    EXPECT_NE(e.find("same type"), std::string::npos) << e;
  }
  {  // a per-channel scale whose length is not the channels'
    ModelBuilder mb(13);
    mb.input("x", kFloat, {4}).output_any("y", kUInt8);
    mb.initializer("s", {3}, {0.1f, 0.1f, 0.1f});
    mb.node(
        "QuantizeLinear", {"x", "s"}, {"y"},
        [](onnx::NodeProto& n) { ModelBuilder::set_int(n, "axis", 0); }, "per_channel");
    const std::string e = session_error(mb.bytes());
    EXPECT_NE(e.find("per_channel"), std::string::npos) << e;
    EXPECT_NE(e.find("4 values"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace volt
