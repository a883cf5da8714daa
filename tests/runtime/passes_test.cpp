// The optimization passes that rewrite convolutional graphs: each checked for the rewrite it
// makes and for the same answer as the unoptimized graph (level 0).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "loaders/loader.hpp"
#include "model_builder.hpp"
#include "operators/common/cpu_isa.hpp"
#include "operators/common/layout.hpp"
#include "operators/common/own_activation.hpp"
#include "runtime/graph_runner.hpp"
#include "runtime/passes/passes.hpp"
#include "test_options.hpp"
#include "unoptimized_reference.hpp"

namespace volt {
namespace {

using testing::expect_same_as_unoptimized;
using testing::ModelBuilder;
using testing::test_options;

std::vector<float> random_values(size_t n, std::mt19937& rng, float lo = -1, float hi = 1) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

Tensor random_tensor(const Shape& shape, std::mt19937& rng) {
  Tensor t = Tensor::empty(DType::Float, shape);
  const auto v = random_values(static_cast<size_t>(t.numel()), rng);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

// (The tolerance of expect_same_as_unoptimized covers the reassociation of folded weights and
// oneDNN's blocking of the reductions: fp32, sums of a few dozen products of values in [-1, 1].)

// The relative L2 distance of b from a (fp32 tensors)
double relative_l2(const Tensor& a, const Tensor& b) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double d = a.data<float>()[i] - b.data<float>()[i];
    diff += d * d;
    norm += static_cast<double>(a.data<float>()[i]) * a.data<float>()[i];
  }
  return std::sqrt(diff / norm);
}

Graph load(const std::string& bytes) {
  return load_model_from_bytes(bytes.data(), bytes.size()).graph;
}

int count_op(const Graph& g, const std::string& op) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.op_type == op;
  return n;
}

TEST(Passes, ConvClipAndLeakyReluFuseAsPostOps) {
  // ReLU6 as Clip with Constant bounds (how PyTorch exports MobileNets), and LeakyRelu.
  ModelBuilder b;
  std::mt19937 rng(1);
  b.input("x", 1, {2, 3, 8, 8}).output("y", 1, {2, 4, 8, 8}).output("z", 1, {2, 4, 8, 8});
  b.initializer("W", {4, 3, 3, 3}, random_values(108, rng, -3, 3))
      .initializer("lo", {}, {0.0f})
      .initializer("hi", {}, {6.0f});
  b.node("Conv", {"x", "W"}, {"c"}, [](auto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  b.node("Clip", {"c", "lo", "hi"}, {"y"});
  b.node("Conv", {"x", "W"}, {"d"}, [](auto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  b.node("LeakyRelu", {"d"}, {"z"}, [](auto& n) { ModelBuilder::set_float(n, "alpha", 0.2f); });
  const std::string bytes = b.bytes();
  const Graph fused = fuse_conv_activation(load(bytes));
  EXPECT_EQ(count_op(fused, "Clip"), 0);
  EXPECT_EQ(count_op(fused, "LeakyRelu"), 0);
  EXPECT_EQ(fused.nodes[0].attr_string("volt.activation", ""), "Clip");
  EXPECT_EQ(fused.nodes[0].attr_float("volt.beta", 0), 6.0f);
  // Values beyond both bounds occur (weights in [-3, 3]), so the clamp is exercised.
  expect_same_as_unoptimized(bytes, {{"x", random_tensor({2, 3, 8, 8}, rng)}});
}

// LeNet's stem, Conv (1 -> 8, 3x3) -> Relu -> MaxPool 2x2 stride 2, then a second Conv -> MaxPool
// 3x3 stride 3 without an activation: with AVX-512 each pool goes into its convolution
// (volt.max_pool: the few-channel loop pools the rows as it computes them), and the session
// computes what the unoptimized graph does, at two input sizes (the second plan is one for
// several shapes) whose maps leave part windows at the edges (27 x 29: pooled 13 x 14 and then
// 4 x 4). A pool with padding, or whose windows overlap, stays a node of its own.
TEST(Passes, MaxPoolAfterAFewChannelConvolutionGoesIntoIt) {
  ModelBuilder b(13);
  std::mt19937 rng(9);
  b.input("x", 1, {-1, 1, -1, -1})
      .output("y", 1, {-1, 8, -1, -1})
      .output("z", 1, {-1, 8, -1, -1})
      .output("w", 1, {-1, 8, -1, -1});
  b.initializer("W1", {8, 1, 3, 3}, random_values(72, rng))
      .initializer("B1", {8}, random_values(8, rng))
      .initializer("W2", {8, 2, 2, 2}, random_values(64, rng))
      .initializer("W3", {8, 1, 3, 3}, random_values(72, rng));
  auto pool = [&](const std::string& in, const std::string& out, int64_t k, int64_t s,
                  int64_t pad) {
    b.node("MaxPool", {in}, {out}, [=](auto& n) {
      ModelBuilder::set_ints(n, "kernel_shape", {k, k});
      ModelBuilder::set_ints(n, "strides", {s, s});
      ModelBuilder::set_ints(n, "pads", {pad, pad, pad, pad});
    });
  };
  b.node("Conv", {"x", "W1", "B1"}, {"c1"}, [](auto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  b.node("Relu", {"c1"}, {"r1"});
  pool("r1", "p1", 2, 2, 0);
  b.node("Slice", {"p1", "starts", "ends", "axes"}, {"half"});
  b.initializer_i64("starts", {1}, {0})
      .initializer_i64("ends", {1}, {2})
      .initializer_i64("axes", {1}, {1});
  b.node("Conv", {"half", "W2"}, {"c2"});
  pool("c2", "y", 3, 3, 0);
  // Not folded: windows that overlap, and padding.
  b.node("Conv", {"x", "W3"}, {"c3"});
  pool("c3", "z", 3, 2, 0);
  b.node("Conv", {"x", "W3"}, {"c4"});
  pool("c4", "w", 2, 2, 1);
  const std::string bytes = b.bytes();
  const Graph g = run_passes(load(bytes), SessionOptions{});
  int folded = 0;
  for (const Node& n : g.nodes) folded += n.has_attr("volt.max_pool");
  const bool fused = cpu_has_avx512();
  EXPECT_EQ(folded, fused ? 2 : 0);
  EXPECT_EQ(count_op(g, "MaxPool"), fused ? 2 : 4);
  for (const Shape& x : {Shape{2, 1, 27, 29}, Shape{3, 1, 20, 21}})
    expect_same_as_unoptimized(bytes, {{"x", random_tensor(x, rng)}});
  // The second size in the same session, after the first (a plan for several shapes).
  Session plain =
      Session::from_bytes(bytes.data(), bytes.size(), test_options({.optimization_level = 0}));
  Session opt = Session::from_bytes(bytes.data(), bytes.size(), test_options());
  for (const Shape& x : {Shape{2, 1, 27, 29}, Shape{3, 1, 20, 21}, Shape{1, 1, 9, 12}}) {
    const NamedValues feeds = {{"x", random_tensor(x, rng)}};
    const auto want = plain.run(feeds), got = opt.run(feeds);
    for (size_t k = 0; k < want.size(); ++k) {
      const Tensor &a = want[k].tensor(), &c = got[k].tensor();
      ASSERT_EQ(a.shape(), c.shape()) << k;
      for (int64_t i = 0; i < a.numel(); ++i)
        ASSERT_NEAR(c.data<float>()[i], a.data<float>()[i],
                    2e-5f * std::max(1.0f, std::abs(a.data<float>()[i])))
            << shape_str(x) << " output " << k << " element " << i;
    }
  }
}

// A U-Net decoder's ConvTranspose -> LeakyRelu: the activation becomes the deconvolution's
// post-op, with the same values as the two ops at level 0.
TEST(Passes, ConvTransposeTakesTheActivationAfterIt) {
  ModelBuilder b;
  std::mt19937 rng(3);
  b.input("x", 1, {2, 6, 5, 5}).output("y", 1, {2, 4, 10, 10});
  b.initializer("W", {6, 4, 2, 2}, random_values(96, rng))
      .initializer("B", {4}, random_values(4, rng));
  b.node("ConvTranspose", {"x", "W", "B"}, {"t"}, [](auto& n) {
    ModelBuilder::set_ints(n, "strides", {2, 2});
  });
  b.node("LeakyRelu", {"t"}, {"y"}, [](auto& n) { ModelBuilder::set_float(n, "alpha", 0.1f); });
  const std::string bytes = b.bytes();
  const Graph fused = fuse_conv_activation(load(bytes));
  EXPECT_EQ(count_op(fused, "LeakyRelu"), 0);
  EXPECT_EQ(fused.nodes[0].attr_string("volt.activation", ""), "LeakyRelu");
  expect_same_as_unoptimized(bytes, {{"x", random_tensor({2, 6, 5, 5}, rng)}});
}

// Resize between convolutions joins the channels-last region (a decoder, FPN or segmentation
// head): no Transpose around it, and the same values as level 0, on the plane kernel (linear
// by scales) and on the general loop over channels-first copies (tf_crop_and_resize by sizes).
TEST(Passes, ResizeStaysChannelsLast) {
  ModelBuilder b;
  std::mt19937 rng(4);
  b.input("x", 1, {2, 3, 6, 5}).output("y", 1, {2, 4, 12, 10}).output("z", 1, {2, 5, 7, 9});
  b.initializer("W1", {5, 3, 3, 3}, random_values(135, rng))
      .initializer("W2", {4, 5, 1, 1}, random_values(20, rng))
      .initializer("roi0", {0}, {})
      .initializer("scales", {4}, {1, 1, 2, 2})
      .initializer("roi", {8}, {0, 0, 0.1f, 0.2f, 1, 1, 0.9f, 1.2f});
  b.initializer_i64("sizes", {4}, {2, 5, 7, 9});
  b.node("Conv", {"x", "W1"}, {"c"}, [](auto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  b.node("Relu", {"c"}, {"r"});
  b.node("Resize", {"r", "roi0", "scales"}, {"u"},
         [](auto& n) { ModelBuilder::set_string(n, "mode", "linear"); });
  b.node("Conv", {"u", "W2"}, {"y"});
  b.node("Resize", {"r", "roi", "", "sizes"}, {"z"}, [](auto& n) {
    ModelBuilder::set_string(n, "mode", "linear");
    ModelBuilder::set_string(n, "coordinate_transformation_mode", "tf_crop_and_resize");
    ModelBuilder::set_float(n, "extrapolation_value", 0.5f);
  });
  const std::string bytes = b.bytes();
  const Graph g = use_channels_last(load(bytes));
  int nhwc_resizes = 0;
  for (const Node& n : g.nodes)
    nhwc_resizes += n.op_type == "Resize" && n.attr_string("volt.layout", "") == "NHWC";
  EXPECT_EQ(nhwc_resizes, 2);
  EXPECT_EQ(count_op(g, "Transpose"), 2);  // y and z leave the region; nothing inside it
  expect_same_as_unoptimized(bytes, {{"x", random_tensor({2, 3, 6, 5}, rng)}});
}

// ShuffleNet's channel shuffle as exporters write it (Reshape to [N, g, C/g, H, W] with the shape
// computed from Shape, Transpose (0, 2, 1, 3, 4), Reshape back) becomes one ChannelShuffle
// node, channels-last between two convolutions, and computes exactly what the three nodes do:
// with S1 splitting the channels (the per-pixel permutation), with an S1 that splits otherwise
// (the general index arithmetic), and channels-first where no convolution is near (planes).
TEST(Passes, ChannelShuffleStaysChannelsLastAndComputesTheThreeNodes) {
  std::mt19937 rng(5);
  struct Case {
    bool convolutions;
    std::vector<std::string> split;  // S1's parts: "n", "c", "h", "w" from Shape, or constants
  };
  const Case cases[] = {{true, {"n", "2", "-1", "h", "w"}},
                        {true, {"n", "3", "-1", "h", "w"}},
                        {true, {"n", "c", "h", "w", "1"}},
                        {false, {"n", "3", "-1", "h", "w"}},
                        {false, {"n", "2", "3", "-1", "1"}}};
  for (const Case& k : cases) {
    ModelBuilder b;
    const int64_t c = 6;
    b.input("x", 1, {2, 3, 4, 5}).output("y", 1, {2, c, 4, 5});
    b.initializer("W1", {c, 3, 1, 1}, random_values(c * 3, rng))
        .initializer("W2", {c, c, 1, 1}, random_values(c * c, rng));
    b.initializer_i64("zero", {1}, {0});
    const char* const index[] = {"i0", "i1", "i2", "i3"};
    for (int64_t i = 0; i < 4; ++i) b.initializer_i64(index[i], {}, {i});
    for (const auto& [name, v] :
         {std::pair<const char*, int64_t>{"k2", 2}, {"k3", 3}, {"k-1", -1}, {"k1", 1}})
      b.initializer_i64(name, {1}, {v});
    std::string x = "x";
    if (k.convolutions) {
      b.node("Conv", {"x", "W1"}, {"a"});
      x = "a";
    }
    b.node("Shape", {x}, {"s"});
    const char* dims = "nchw";
    for (int64_t i = 0; i < 4; ++i) {
      const std::string d(1, dims[i]);
      b.node("Gather", {"s", index[i]}, {d + "0"});
      b.node("Unsqueeze", {d + "0", "zero"}, {d + "1"});
    }
    std::vector<std::string> parts;
    for (const std::string& p : k.split) parts.push_back(std::isalpha(p[0]) ? p + "1" : "k" + p);
    b.node("Concat", parts, {"s1"}, [](auto& n) { ModelBuilder::set_int(n, "axis", 0); });
    b.node("Concat", {"n1", "k-1", "h1", "w1"}, {"s2"},
           [](auto& n) { ModelBuilder::set_int(n, "axis", 0); });
    if (!k.convolutions) {
      b.initializer("bias", {1}, {0.5f});
      b.node("Add", {"x", "bias"}, {"x2"});  // (six channels: x's three, twice)
      b.node("Concat", {"x2", "x"}, {"x6"}, [](auto& n) { ModelBuilder::set_int(n, "axis", 1); });
      x = "x6";
    }
    b.node("Reshape", {x, "s1"}, {"r"}).node("Transpose", {"r"}, {"t"}, [](auto& n) {
      ModelBuilder::set_ints(n, "perm", {0, 2, 1, 3, 4});
    });
    b.node("Reshape", {"t", "s2"}, {k.convolutions ? "u" : "y"});
    if (k.convolutions) b.node("Conv", {"u", "W2"}, {"y"});
    const std::string bytes = b.bytes();
    const Graph g = run_passes(load(bytes), test_options());
    ASSERT_EQ(count_op(g, "ChannelShuffle"), 1);
    EXPECT_EQ(count_op(g, "Reshape"), 0);
    // With the convolutions, only y leaves the region: the Shape reads the channels-last value.
    EXPECT_EQ(count_op(g, "Transpose"), k.convolutions ? 1 : 0);
    for (const Node& n : g.nodes) {
      if (n.op_type == "ChannelShuffle") {
        EXPECT_EQ(n.attr_string("volt.layout", ""), k.convolutions ? "NHWC" : "");
      }
    }
    // (Data movement only: the tolerance is for the convolutions.)
    expect_same_as_unoptimized(bytes, {{"x", random_tensor({2, 3, 4, 5}, rng)}});
  }
}

// Dropout goes where it passes X through: inference form, or training mode with a constant
// ratio of 0 (torch's Swin exports so) and no reader of the mask; it stays where it drops.
TEST(Passes, DropoutThatDropsNothingGoes) {
  auto model = [](float ratio, bool mask_read) {
    ModelBuilder b(13);
    b.input("x", 1, {2, 3}).output("y", 1, {2, 3});
    if (mask_read) b.output("m", 9, {2, 3});
    b.initializer("ratio", {}, {ratio});
    auto* t = b.proto().mutable_graph()->add_initializer();
    t->set_name("training");
    t->set_data_type(onnx::TensorProto::BOOL);
    t->add_int32_data(1);
    b.node("Dropout", {"x", "ratio", "training"}, {"d", "m"});
    b.node("Relu", {"d"}, {"y"});
    return b.bytes();
  };
  EXPECT_EQ(count_op(remove_identities(load(model(0.0f, false))), "Dropout"), 0);
  EXPECT_EQ(count_op(remove_identities(load(model(0.0f, true))), "Dropout"), 1);
  EXPECT_EQ(count_op(remove_identities(load(model(0.3f, false))), "Dropout"), 1);
}

// Constant nodes become initializers holding the value of whichever attribute they carry
// (value, value_ints, value_float); one whose output is a graph output stays a node. The graph
// computes what it did (level 0 runs no pass).
TEST(Passes, ConstantsBecomeInitializers) {
  ModelBuilder b(13);
  b.input("x", 1, {2, 3}).output("y", 1, {3, 2}).output("k", 1, {3});
  b.node("Constant", {}, {"c_tensor"}, [](onnx::NodeProto& n) {
    ModelBuilder::set_float_tensor(n, "value", {3}, {1, -2, 3});
  });
  b.node("Constant", {}, {"c_shape"}, [](onnx::NodeProto& n) {
    ModelBuilder::set_ints(n, "value_ints", {3, 2});
  });
  b.node("Constant", {}, {"c_scale"},
         [](onnx::NodeProto& n) { ModelBuilder::set_float(n, "value_float", 0.5f); });
  b.node("Constant", {}, {"k"}, [](onnx::NodeProto& n) {
    ModelBuilder::set_float_tensor(n, "value", {3}, {4, 5, 6});
  });
  b.node("Add", {"x", "c_tensor"}, {"a"});
  b.node("Mul", {"a", "c_scale"}, {"m"});
  b.node("Reshape", {"m", "c_shape"}, {"y"});
  const std::string bytes = b.bytes();
  const Graph g = constants_as_initializers(load(bytes));
  EXPECT_EQ(count_op(g, "Constant"), 1);  // k, a graph output
  ASSERT_TRUE(g.initializers.count("c_tensor") && g.initializers.count("c_shape") &&
              g.initializers.count("c_scale"));
  const Tensor& shape = g.initializers.at("c_shape");
  EXPECT_EQ(shape.dtype(), DType::Int64);
  EXPECT_EQ(std::vector<int64_t>(shape.data<int64_t>(), shape.data<int64_t>() + shape.numel()),
            (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(g.initializers.at("c_scale").rank(), 0);
  EXPECT_EQ(g.initializers.at("c_tensor").data<float>()[1], -2.0f);
  std::mt19937 rng(7);
  expect_same_as_unoptimized(bytes, {{"x", random_tensor({2, 3}, rng)}});
}

// Attention as exporters write it: heads split by Reshape + Transpose before Q·Kᵀ (K's
// Transpose straight to [B, H, D, S]), joined by Transpose + Reshape after scores·V. Every
// Transpose folds into its MatMul (strided operands and output, on oneDNN's kernels), with the
// unoptimized graph's answer; one also read elsewhere stays.
TEST(Passes, AttentionTransposesFoldIntoTheMatMuls) {
  const int64_t b = 2, s = 7, h = 3, d = 8;
  ModelBuilder mb(13);
  std::mt19937 rng(21);
  for (const char* v : {"q", "k", "v"}) mb.input(v, 1, {b, s, h * d});
  mb.output("y", 1, {b, s, h * d}).output("kt_out", 1, {b, h, d, s});
  mb.initializer_i64("heads", {4}, {b, s, h, d}).initializer_i64("joined", {3}, {b, s, h * d});
  auto transpose = [&](const std::string& in, const std::string& out, std::vector<int64_t> perm) {
    mb.node("Transpose", {in}, {out}, [perm](auto& n) { ModelBuilder::set_ints(n, "perm", perm); });
  };
  for (const char* v : {"q", "k", "v"}) mb.node("Reshape", {v, "heads"}, {std::string(v) + "4"});
  transpose("q4", "qt", {0, 2, 1, 3});
  transpose("k4", "kt", {0, 2, -1, 1});  // a negative axis, as Transpose allows
  transpose("v4", "vt", {0, 2, 1, 3});
  mb.node("MatMul", {"qt", "kt"}, {"scores"});
  mb.node("Softmax", {"scores"}, {"p"}, [](auto& n) { ModelBuilder::set_int(n, "axis", -1); });
  mb.node("MatMul", {"p", "vt"}, {"ctx"});
  transpose("ctx", "ctxt", {0, 2, 1, 3});
  mb.node("Reshape", {"ctxt", "joined"}, {"y"});
  mb.node("Identity", {"kt"}, {"kt_out"});  // K's transpose is read elsewhere too
  const std::string bytes = mb.bytes();
  const Graph g = fold_transpose_into_matmul(load(bytes));
  EXPECT_EQ(count_op(g, "Transpose"), 1);  // K's
  Session opt = Session::from_bytes(bytes.data(), bytes.size(), test_options());
  NamedValues feeds;
  for (const char* v : {"q", "k", "v"}) feeds.emplace_back(v, random_tensor({b, s, h * d}, rng));
  RunProfile profile;
  opt.run(feeds, {}, {.profile = &profile});
  int transposes = 0;
  for (const ProfileEvent& e : profile.events) {
    transposes += e.op == "Transpose";
    EXPECT_TRUE(e.reference.empty()) << e.node << ": " << e.reference;
  }
  EXPECT_EQ(transposes, 1);
  expect_same_as_unoptimized(bytes, feeds, 1e-5f);
}

// The same pattern with a scale (on the scores, or on Q) and a padding mask, at sizes that leave
// blocks part empty (37 query rows: a block of 24 and one of 13; 37 keys: 32 columns and 5; depth
// 40): in a CPU session it becomes one Attention node with the heads' Transposes folded in (Q, Kᵀ
// and V read through their strides, the context written through its Transpose), no Transpose,
// MatMul or Softmax left, and computes what the unoptimized graph computes, in f32 (volt's packed
// product on AVX-512) and in f64 (one query row at a time, through the same strides); and so with
// one query row over the 37 keys (a decoder's step: K's and V's rows read where they lie, without
// packing).
TEST(Passes, AttentionWithFoldedTransposesMatchesTheUnfusedGraph) {
  const int64_t b = 2, s = 37, h = 3, d = 40;
  for (const int64_t sq : {s, int64_t{1}})
    for (const int elem : {1, 11}) {
      const bool f32 = elem == 1;
      ModelBuilder mb(13);
      mb.input("q", elem, {b, sq, h * d});
      for (const char* v : {"k", "v"}) mb.input(v, elem, {b, s, h * d});
      mb.input("mask", elem, {b, 1, 1, s}).output("y", elem, {b, sq, h * d});
      mb.initializer_i64("heads", {4}, {b, s, h, d}).initializer_i64("joined", {3}, {b, sq, h * d});
      mb.initializer_i64("q_heads", {4}, {b, sq, h, d});
      auto transpose = [&](const std::string& in, const std::string& out,
                           std::vector<int64_t> perm) {
        mb.node("Transpose", {in}, {out},
                [perm](auto& n) { ModelBuilder::set_ints(n, "perm", perm); });
      };
      mb.node("Reshape", {"q", "q_heads"}, {"q4"});
      for (const char* v : {"k", "v"}) mb.node("Reshape", {v, "heads"}, {std::string(v) + "4"});
      transpose("q4", "qt", {0, 2, 1, 3});
      if (sq == s) {
        transpose("k4", "kt", {0, 2, 3, 1});
      } else {  // K [b, h, s, d] with its rows' elements adjacent, then Kᵀ of its own
        transpose("k4", "kh", {0, 2, 1, 3});
        transpose("kh", "kt", {0, 1, 3, 2});
      }
      transpose("v4", "vt", {0, 2, 1, 3});
      // The scale (f32 only: a float constant) on the scores, or, as PyTorch writes it, on Q.
      const bool scale_q = f32 && sq == 1;
      if (f32) mb.initializer("c", {}, {std::sqrt(static_cast<float>(d))});
      if (scale_q) mb.node("Div", {"qt", "c"}, {"qs"});
      mb.node("MatMul", {scale_q ? "qs" : "qt", "kt"}, {"scores"});
      std::string masked_from = "scores";
      if (f32 && !scale_q) {
        mb.node("Div", {"scores", "c"}, {"scaled"});
        masked_from = "scaled";
      }
      mb.node("Add", {masked_from, "mask"}, {"masked"});
      mb.node("Softmax", {"masked"}, {"p"}, [](auto& n) { ModelBuilder::set_int(n, "axis", -1); });
      mb.node("MatMul", {"p", "vt"}, {"ctx"});
      transpose("ctx", "ctxt", {0, 2, 1, 3});
      mb.node("Reshape", {"ctxt", "joined"}, {"y"});
      const std::string bytes = mb.bytes();

      std::mt19937 rng(23);
      NamedValues feeds;
      for (const char* v : {"q", "k", "v", "mask"}) {
        const std::string name = v;
        const Shape shape =
            name == "mask" ? Shape{b, 1, 1, s} : Shape{b, name == "q" ? sq : s, h * d};
        Tensor t = random_tensor(shape, rng);
        if (name == "mask")
          for (int64_t i = 0; i < b; ++i) t.data<float>()[i * s + s - 1 - i] = -1e4f;  // padding
        if (!f32) {
          std::vector<double> wide(t.data<float>(), t.data<float>() + t.numel());
          t = Tensor::from(wide, shape);
        }
        feeds.emplace_back(v, t);
      }
      Session opt = Session::from_bytes(bytes.data(), bytes.size(), test_options());
      RunProfile profile;
      const auto got = opt.run(feeds, {}, {.profile = &profile});
      // (Elsewhere MatMul and Softmax run attention: see the pass list.)
      const bool fused = cpu_has_avx512() && cpu_has_avx512f();
      int attention = 0;
      for (const ProfileEvent& e : profile.events) {
        attention += e.op == "Attention";
        if (fused) {
          EXPECT_TRUE(e.op != "Transpose" && e.op != "MatMul" && e.op != "Softmax" && e.op != "Div")
              << e.op;
        }
      }
      EXPECT_EQ(attention, fused ? 1 : 0);
      if (f32) {
        expect_same_as_unoptimized(bytes, feeds, 1e-5f);
        continue;
      }
      Session plain =
          Session::from_bytes(bytes.data(), bytes.size(), test_options({.optimization_level = 0}));
      const Tensor want = plain.run(feeds)[0].tensor(), y = got[0].tensor();
      ASSERT_EQ(want.shape(), y.shape());
      for (int64_t i = 0; i < want.numel(); ++i)
        ASSERT_NEAR(y.data<double>()[i], want.data<double>()[i], 1e-12) << sq << " " << i;
    }
}

// A decoder's cross-attention projections: memory [B, S, D] read as [S, B, D] (a Transpose that
// folds into the MatMul) times shared weights [D, N], the result read back as [B, S, N] (a second
// fold). At batch 1 the batch and row axes run as one axis of rows (one product, not S of one
// row); at batch 3 their strides do not allow it and the product stays batched. Both compute what
// the unoptimized graph computes; the MatMul keeps both Transposes folded.
TEST(Passes, ProjectionsReadThroughFoldedTransposesRunAsOneProduct) {
  const int64_t s = 9, d = 16, n = 24;
  std::mt19937 rng(8);
  for (const int64_t batch : {1, 3}) {
    ModelBuilder mb(13);
    mb.input("mem", 1, {batch, s, d}).output("y", 1, {batch, s, n}).output("z", 1, {s, batch, n});
    // Channels-first features [B, D, S] read as [B, S, D]: at batch 1 rows of stride 1.
    mb.input("feat", 1, {batch, d, s}).output("w", 1, {batch, s, n});
    mb.initializer("W", {d, n}, random_values(d * n, rng))
        .initializer("Wz", {d, n}, random_values(d * n, rng));
    auto transpose = [&](const std::string& in, const std::string& out) {
      mb.node("Transpose", {in}, {out}, [](auto& t) {
        ModelBuilder::set_ints(t, "perm", {1, 0, 2});
      });
    };
    transpose("mem", "seq_first");
    mb.node("MatMul", {"seq_first", "W"}, {"p"});
    transpose("p", "y");
    transpose("mem", "seq_first_z");  // (one Transpose a reader: each folds)
    mb.node("MatMul", {"seq_first_z", "Wz"}, {"z"});
    mb.node("Transpose", {"feat"}, {"feat_t"}, [](auto& t) {
      ModelBuilder::set_ints(t, "perm", {0, 2, 1});
    });
    mb.node("MatMul", {"feat_t", "W"}, {"w"});
    const std::string bytes = mb.bytes();
    EXPECT_EQ(count_op(fold_transpose_into_matmul(load(bytes)), "Transpose"), 0);
    expect_same_as_unoptimized(
        bytes,
        {{"mem", random_tensor({batch, s, d}, rng)}, {"feat", random_tensor({batch, d, s}, rng)}},
        1e-5f);
  }
}

// ConvNeXt's block: a depthwise 7x7 convolution whose X arrives channels-last (the Transpose
// back from its LayerNorm/MatMul stage) in a region stored in blocks. Forced onto those layouts
// oneDNN has only its reference convolution; the kernel lets it choose and stages instead.
TEST(Passes, ConvolutionsNeverSettleForOneDnnReference) {
  ModelBuilder b;
  std::mt19937 rng(5);
  b.input("x", 1, {1, 32, 14, 14}).output("y", 1, {1, 32, 14, 14});
  for (const char* w : {"W1", "W2"}) b.initializer(w, {32, 1, 7, 7}, random_values(32 * 49, rng));
  b.initializer("M", {32, 32}, random_values(32 * 32, rng));
  auto dw = [](auto& n) {
    ModelBuilder::set_int(n, "group", 32);
    ModelBuilder::set_ints(n, "pads", {3, 3, 3, 3});
  };
  b.node("Conv", {"x", "W1"}, {"c1"}, dw);
  b.node("Transpose", {"c1"}, {"t1"}, [](auto& n) {
    ModelBuilder::set_ints(n, "perm", {0, 2, 3, 1});
  });
  b.node("MatMul", {"t1", "M"}, {"m1"});
  b.node("Transpose", {"m1"}, {"t2"}, [](auto& n) {
    ModelBuilder::set_ints(n, "perm", {0, 3, 1, 2});
  });
  b.node("Add", {"t2", "x"}, {"a1"});
  b.node("Conv", {"a1", "W2"}, {"y"}, dw);
  const std::string bytes = b.bytes();
  Session s = Session::from_bytes(bytes.data(), bytes.size(), test_options());
  RunProfile profile;
  s.run({{"x", random_tensor({1, 32, 14, 14}, rng)}}, {}, {.profile = &profile});
  for (const ProfileEvent& e : profile.events)
    EXPECT_TRUE(e.reference.empty()) << e.node << " (" << e.op << "): " << e.reference;
  expect_same_as_unoptimized(bytes, {{"x", random_tensor({1, 32, 14, 14}, rng)}}, 1e-4f);
}

// HardSwish and HardSigmoid as converters write them out (x * Clip(x + 3, 0, 6) / 6 and
// Clip(x / 6 + 0.5, 0, 1)), and a gate with other constants, become HardSwish, HardSigmoid and
// x * HardSigmoid(x) by the same arithmetic; the HardSwish after a convolution then fuses into
// it. A chain with a value read elsewhere, or with a constant that broadcasts x to a higher rank,
// stays as it is. Every model computes what the unoptimized graph computes.
TEST(Passes, ClampedGatesWrittenOutBecomeTheirOps) {
  std::mt19937 rng(41);
  auto scalar = [](ModelBuilder& b, const char* name, float v) { b.initializer(name, {}, {v}); };
  {  // HardSwish after a Conv, and a HardSigmoid gate multiplying another value
    ModelBuilder b;
    b.input("x", 1, {1, 4, 6, 6}).input("z", 1, {1, 4, 6, 6});
    b.output("y", 1, {}).output("q", 1, {});
    b.initializer("W", {4, 4, 3, 3}, random_values(144, rng));
    for (auto [n, v] :
         {std::pair{"three", 3.0f}, {"zero", 0.0f}, {"six", 6.0f}, {"half", 0.5f}, {"one", 1.0f}})
      scalar(b, n, v);
    b.node("Conv", {"x", "W"}, {"c"}, [](auto& n) {
      ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
    });
    b.node("Add", {"c", "three"}, {"a"}).node("Clip", {"a", "zero", "six"}, {"k"});
    b.node("Mul", {"c", "k"}, {"m"}).node("Div", {"m", "six"}, {"y"});
    b.node("Div", {"x", "six"}, {"d"}).node("Add", {"d", "half"}, {"e"});
    b.node("Clip", {"e", "zero", "one"}, {"g"}).node("Mul", {"z", "g"}, {"q"});
    const std::string bytes = b.bytes();
    const Graph g = fold_clamped_gates(load(bytes));
    EXPECT_EQ(count_op(g, "HardSwish"), 1);
    EXPECT_EQ(count_op(g, "HardSigmoid"), 1);
    EXPECT_EQ(count_op(g, "Clip") + count_op(g, "Div") + count_op(g, "Add"), 0);
    const Graph fused = run_passes(load(bytes), test_options());
    EXPECT_EQ(count_op(fused, "HardSwish"), 0);  // in the Conv
    expect_same_as_unoptimized(
        bytes, {{"x", random_tensor({1, 4, 6, 6}, rng)}, {"z", random_tensor({1, 4, 6, 6}, rng)}});
  }
  {  // x * Clip(2x + 1, 0, 4) / 4 = x * HardSigmoid(x; 0.5, 0.25)
    ModelBuilder b;
    b.input("x", 1, {2, 7}).output("y", 1, {});
    for (auto [n, v] : {std::pair{"two", 2.0f}, {"one", 1.0f}, {"zero", 0.0f}, {"four", 4.0f}})
      scalar(b, n, v);
    b.node("Mul", {"two", "x"}, {"t"}).node("Add", {"t", "one"}, {"a"});
    b.node("Clip", {"a", "zero", "four"}, {"k"}).node("Mul", {"k", "x"}, {"m"});
    b.node("Div", {"m", "four"}, {"y"});
    const std::string bytes = b.bytes();
    const Graph g = fold_clamped_gates(load(bytes));
    ASSERT_EQ(count_op(g, "HardSigmoid"), 1);
    EXPECT_EQ(g.nodes.size(), 2u);
    for (const Node& n : g.nodes)
      if (n.op_type == "HardSigmoid") {
        EXPECT_FLOAT_EQ(n.attr_float("alpha", 0), 0.5f);
        EXPECT_FLOAT_EQ(n.attr_float("beta", 0), 0.25f);
      }
    Tensor x = random_tensor({2, 7}, rng);  // over [-6, 6]: both clamps and the slope
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] *= 6.0f;
    expect_same_as_unoptimized(bytes, {{"x", x}});
  }
  {  // the Add's output is a graph output too; a [1, 1, 1] constant on a value of unknown rank
    ModelBuilder b;
    b.input("x", 1, {3, 5}).output("y", 1, {}).output("a", 1, {}).output("y2", 1, {});
    scalar(b, "three", 3.0f);
    scalar(b, "zero", 0.0f);
    scalar(b, "six", 6.0f);
    b.initializer("three3", {1, 1, 1}, {3.0f});
    b.node("Add", {"x", "three"}, {"a"}).node("Clip", {"a", "zero", "six"}, {"k"});
    b.node("Mul", {"x", "k"}, {"m"}).node("Div", {"m", "six"}, {"y"});
    b.node("Relu", {"x"}, {"r"}).node("Add", {"r", "three3"}, {"a2"});
    b.node("Clip", {"a2", "zero", "six"}, {"k2"}).node("Mul", {"r", "k2"}, {"m2"});
    b.node("Div", {"m2", "six"}, {"y2"});
    const std::string bytes = b.bytes();
    const Graph g = fold_clamped_gates(load(bytes));
    EXPECT_EQ(count_op(g, "Clip"), 2);
    EXPECT_EQ(count_op(g, "HardSwish") + count_op(g, "HardSigmoid"), 0);
  }
}

// A text recognizer's front end: convolutions and max pools, square and (2, 1), all with
// multiples of 16 channels (what the blocked layout takes). On a CPU without AVX-512, oneDNN's
// pooling has no kernel for 16-channel blocks and ran its reference loop (the blocked layout
// is kept for AVX-512): whatever the CPU, no node settles for a reference loop.
TEST(Passes, ConvolutionsAndPoolsRunOnTheCpusOwnLayout) {
  ModelBuilder b;
  std::mt19937 rng(9);
  b.input("x", 1, {1, 16, 16, 40}).output("y", 1, {1, 32, 4, 20});
  b.initializer("W1", {32, 16, 3, 3}, random_values(32 * 16 * 9, rng));
  b.initializer("W2", {32, 32, 3, 3}, random_values(32 * 32 * 9, rng));
  auto conv = [](auto& n) { ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1}); };
  auto pool = [](std::vector<int64_t> k) {
    return [k](auto& n) {
      ModelBuilder::set_ints(n, "kernel_shape", k);
      ModelBuilder::set_ints(n, "strides", k);
    };
  };
  b.node("Conv", {"x", "W1"}, {"c1"}, conv).node("Relu", {"c1"}, {"r1"});
  b.node("MaxPool", {"r1"}, {"p1"}, pool({2, 2}));
  b.node("Conv", {"p1", "W2"}, {"c2"}, conv).node("Relu", {"c2"}, {"r2"});
  b.node("MaxPool", {"r2"}, {"y"}, pool({2, 1}));
  const std::string bytes = b.bytes();
  Session s = Session::from_bytes(bytes.data(), bytes.size(), test_options());
  RunProfile profile;
  s.run({{"x", random_tensor({1, 16, 16, 40}, rng)}}, {}, {.profile = &profile});
  for (const ProfileEvent& e : profile.events)
    EXPECT_TRUE(e.reference.empty()) << e.node << " (" << e.op << "): " << e.reference;
  expect_same_as_unoptimized(bytes, {{"x", random_tensor({1, 16, 16, 40}, rng)}}, 1e-4f);
}

// The activations converters write after convolutions fold into them: single nodes (Sigmoid,
// Tanh, Elu, HardSigmoid, HardSwish) and x * gate(x) written out (SiLU as x * Sigmoid(x),
// HardSwish as x * HardSigmoid(x; 1/6, 1/2)); a gate with other parameters stays a Mul.
TEST(Passes, ConvTakesEveryActivationConvertersWrite) {
  struct Case {
    std::string gate;  // the op after the Conv
    bool gated;        // then Mul(conv, gate)
    float alpha, beta;
    std::string fused;  // volt.activation, "" when nothing fuses
  };
  const std::vector<Case> cases = {
      {"Sigmoid", true, 0, 0, "Swish"},
      {"HardSigmoid", true, 1.0f / 6, 0.5f, "HardSwish"},
      {"HardSigmoid", true, 0.2f, 0.5f, ""},
      {"Sigmoid", false, 0, 0, "Sigmoid"},
      {"Tanh", false, 0, 0, "Tanh"},
      {"Elu", false, 0.7f, 0, "Elu"},
      {"HardSigmoid", false, 0.3f, 0.4f, "HardSigmoid"},
      {"HardSwish", false, 0, 0, "HardSwish"},
  };
  for (const auto& c : cases) {
    ModelBuilder b(14);
    std::mt19937 rng(6);
    b.input("x", 1, {2, 3, 7, 6}).output("y", 1, {2, 8, 7, 6});
    b.initializer("W", {8, 3, 3, 3}, random_values(216, rng, -2, 2));
    b.node("Conv", {"x", "W"}, {"c"}, [](auto& n) {
      ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
    });
    b.node(c.gate, {"c"}, {c.gated ? "g" : "y"}, [&](auto& n) {
      if (c.gate == "HardSigmoid" || c.gate == "Elu") ModelBuilder::set_float(n, "alpha", c.alpha);
      if (c.gate == "HardSigmoid") ModelBuilder::set_float(n, "beta", c.beta);
    });
    if (c.gated) b.node("Mul", {"g", "c"}, {"y"});
    const std::string bytes = b.bytes();
    const Graph fused = fuse_conv_activation(load(bytes));
    EXPECT_EQ(fused.nodes[0].attr_string("volt.activation", ""), c.fused) << c.gate;
    EXPECT_EQ(fused.nodes.size(), c.fused.empty() ? (c.gated ? 3u : 2u) : 1u) << c.gate;
    expect_same_as_unoptimized(bytes, {{"x", random_tensor({2, 3, 7, 6}, rng)}}, 1e-5f);
  }
}

// An explicit zero Pad before a convolution joins the convolution's own pads; a Pad of another
// value, or of the channel axis, stays.
TEST(Passes, ZeroPadFoldsIntoTheConvolution) {
  auto model = [](std::vector<int64_t> pads, float value) {
    ModelBuilder b(13);
    std::mt19937 rng(7);
    b.input("x", 1, {2, 3, 6, 7}).output_any("y", 1);
    b.initializer("W", {4, 3, 3, 3}, random_values(108, rng)).initializer("v", {}, {value});
    b.initializer_i64("pads", {8}, pads);
    b.node("Pad", {"x", "pads", "v"}, {"p"});
    b.node("Conv", {"p", "W"}, {"y"}, [](auto& n) {
      ModelBuilder::set_ints(n, "pads", {1, 0, 0, 1});
      ModelBuilder::set_ints(n, "strides", {2, 1});
    });
    return b.bytes();
  };
  std::mt19937 rng(8);
  const std::string folded = model({0, 0, 2, 1, 0, 0, 1, 3}, 0.0f);
  const Graph g = fold_pad_into_conv(load(folded));
  ASSERT_EQ(count_op(g, "Pad"), 0);
  EXPECT_EQ(g.nodes[0].attr_ints("pads"), (std::vector<int64_t>{3, 1, 1, 4}));
  expect_same_as_unoptimized(folded, {{"x", random_tensor({2, 3, 6, 7}, rng)}});
  EXPECT_EQ(count_op(fold_pad_into_conv(load(model({0, 0, 2, 1, 0, 0, 1, 3}, 1.0f))), "Pad"), 1);
  EXPECT_EQ(count_op(fold_pad_into_conv(load(model({0, 1, 2, 1, 0, 0, 1, 3}, 0.0f))), "Pad"), 1);
}

// A zero Pad before a pool: into an AveragePool's own pads with the padding counted
// (count_include_pad 1), the same averages; one that pads nothing disappears before a MaxPool too.
// Where the pool would differ (a MaxPool over real padding, ceil_mode windows past the edge), it
// stays.
TEST(Passes, ZeroPadFoldsIntoThePool) {
  auto model = [](const char* pool, std::vector<int64_t> pads, int64_t ceil_mode) {
    ModelBuilder b(13);
    b.input("x", 1, {2, 3, 6, 7}).output_any("y", 1);
    b.initializer("v", {}, {0.0f}).initializer_i64("pads", {8}, pads);
    b.node("Pad", {"x", "pads", "v"}, {"p"});
    b.node(pool, {"p"}, {"y"}, [&](auto& n) {
      ModelBuilder::set_ints(n, "kernel_shape", {3, 2});
      ModelBuilder::set_ints(n, "strides", {2, 2});
      ModelBuilder::set_int(n, "ceil_mode", ceil_mode);
    });
    return b.bytes();
  };
  std::mt19937 rng(10);
  const std::vector<int64_t> some = {0, 0, 2, 1, 0, 0, 1, 3}, none(8, 0);
  const std::string average = model("AveragePool", some, 0);
  const Graph g = fold_pad_into_conv(load(average));
  ASSERT_EQ(count_op(g, "Pad"), 0);
  EXPECT_EQ(g.nodes[0].attr_ints("pads"), (std::vector<int64_t>{2, 1, 1, 3}));
  EXPECT_EQ(g.nodes[0].attr_int("count_include_pad"), 1);
  for (const std::string& bytes :
       {average, model("MaxPool", none, 0), model("AveragePool", none, 1)}) {
    EXPECT_EQ(count_op(fold_pad_into_conv(load(bytes)), "Pad"), 0);
    expect_same_as_unoptimized(bytes, {{"x", random_tensor({2, 3, 6, 7}, rng)}});
  }
  EXPECT_EQ(count_op(fold_pad_into_conv(load(model("MaxPool", some, 0))), "Pad"), 1);
  EXPECT_EQ(count_op(fold_pad_into_conv(load(model("AveragePool", some, 1))), "Pad"), 1);
}

// Global average pooling written as ReduceMean over the spatial axes (MNASNet's x.mean([2, 3]))
// becomes GlobalAveragePool (and Flatten when the axes are dropped), which the layout passes
// keep in the convolutions' layout: no reorder of the last activation back to NCHW. Its rank is
// the convolution's, found through the Relu and the residual Add; the same values as level 0.
// ReduceMean over other axes, or of a value whose rank is not known, stays.
TEST(Passes, SpatialReduceMeanBecomesGlobalAveragePool) {
  auto model = [](std::vector<int64_t> axes, int64_t keepdims, bool opset18, bool declared) {
    ModelBuilder b(opset18 ? 18 : 13);
    std::mt19937 rng(12);
    b.input("x", 1, {2, 16, 6, 7}).output_any("y", 1);
    b.initializer("W", {16, 16, 3, 3}, random_values(16 * 16 * 9, rng));
    b.node("Conv", {"x", "W"}, {"c"}, [](auto& n) {
      ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
    });
    b.node("Relu", {"c"}, {"r"});
    b.node("Add", {"r", "x"}, {"s"});
    const std::string in = declared ? "x" : "s";
    if (opset18) {
      b.initializer_i64("axes", {static_cast<int64_t>(axes.size())}, axes);
      b.node("ReduceMean", {in, "axes"}, {"y"},
             [&](auto& n) { ModelBuilder::set_int(n, "keepdims", keepdims); });
    } else {
      b.node("ReduceMean", {in}, {"y"}, [&](auto& n) {
        ModelBuilder::set_ints(n, "axes", axes);
        ModelBuilder::set_int(n, "keepdims", keepdims);
      });
    }
    return b.bytes();
  };
  std::mt19937 rng(13);
  for (const bool opset18 : {false, true})
    for (const int64_t keepdims : {0, 1}) {
      const std::string bytes = model({-1, 2}, keepdims, opset18, false);
      const Graph g = reduce_mean_as_global_pool(load(bytes));
      EXPECT_EQ(count_op(g, "ReduceMean"), 0);
      EXPECT_EQ(count_op(g, "GlobalAveragePool"), 1);
      EXPECT_EQ(count_op(g, "Flatten"), keepdims ? 0 : 1);
      const Graph all = run_passes(load(bytes), test_options());
      EXPECT_EQ(count_op(all, "Transpose") + count_op(all, "ChannelsFirst"), 1);  // after the pool
      expect_same_as_unoptimized(bytes, {{"x", random_tensor({2, 16, 6, 7}, rng)}});
      // A declared graph input of rank 4.
      EXPECT_EQ(count_op(reduce_mean_as_global_pool(load(model({2, 3}, keepdims, opset18, true))),
                         "GlobalAveragePool"),
                1);
    }
  EXPECT_EQ(
      count_op(reduce_mean_as_global_pool(load(model({1, 2}, 0, false, false))), "ReduceMean"), 1);
  EXPECT_EQ(count_op(reduce_mean_as_global_pool(load(model({3}, 1, true, false))), "ReduceMean"),
            1);
  // Keras through tf2onnx: the mean over axes 1 and 2 of the image transposed to channels-last.
  auto keras = [](std::vector<int64_t> axes, int64_t keepdims) {
    ModelBuilder b(13);
    std::mt19937 rng(14);
    b.input("x", 1, {2, 8, 5, 6}).output_any("y", 1);
    b.initializer("W", {16, 8, 3, 3}, random_values(16 * 8 * 9, rng));
    b.node("Conv", {"x", "W"}, {"c"});
    b.node("Relu", {"c"}, {"r"});
    b.node("Transpose", {"r"}, {"t"}, [](auto& n) {
      ModelBuilder::set_ints(n, "perm", {0, 2, 3, 1});
    });
    b.node("ReduceMean", {"t"}, {"y"}, [&](auto& n) {
      ModelBuilder::set_ints(n, "axes", axes);
      ModelBuilder::set_int(n, "keepdims", keepdims);
    });
    return b.bytes();
  };
  for (const int64_t keepdims : {0, 1}) {
    const std::string bytes = keras({1, -2}, keepdims);
    const Graph g = eliminate_dead_nodes(reduce_mean_as_global_pool(load(bytes)));
    EXPECT_EQ(count_op(g, "ReduceMean"), 0);
    EXPECT_EQ(count_op(g, "Transpose"), keepdims ? 1 : 0);  // of the pooled [2, 16, 1, 1]
    expect_same_as_unoptimized(bytes, {{"x", random_tensor({2, 8, 5, 6}, rng)}});
  }
  EXPECT_EQ(count_op(reduce_mean_as_global_pool(load(keras({2, 3}, 0))), "ReduceMean"), 1);
  // The rank of a graph input without a declared shape is not known.
  ModelBuilder b(13);
  b.input_any("x", 1).output_any("y", 1);
  b.node("ReduceMean", {"x"}, {"y"}, [](auto& n) { ModelBuilder::set_ints(n, "axes", {2, 3}); });
  EXPECT_EQ(count_op(reduce_mean_as_global_pool(load(b.bytes())), "ReduceMean"), 1);
}

// If branches go through the passes too: a Conv -> Relu inside a branch runs fused, with the
// same values as level 0, on either branch.
TEST(Passes, SubgraphBodiesAreOptimizedToo) {
  std::mt19937 rng(9);
  auto branch = [&](const char* act, const char* name) {
    onnx::GraphProto g;
    g.set_name(name);
    auto* w = g.add_initializer();
    w->set_name(std::string(name) + "_W");
    w->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : {4, 3, 3, 3}) w->add_dims(d);
    for (float v : random_values(108, rng)) w->add_float_data(v);
    auto* conv = g.add_node();
    conv->set_op_type("Conv");
    conv->add_input(std::string("x"));  // (a const char* here tripped GCC 12's -Wrestrict)
    conv->add_input(w->name());
    conv->add_output(std::string(name) + "_c");
    ModelBuilder::set_ints(*conv, "pads", {1, 1, 1, 1});
    auto* a = g.add_node();
    a->set_op_type(act);
    a->add_input(conv->output(0));
    a->add_output(std::string(name) + "_y");
    auto* out = g.add_output();
    out->set_name(a->output(0));
    out->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    return g;
  };
  ModelBuilder b(13);
  b.input("x", 1, {1, 3, 6, 6}).input("flag", 9, {}).output_any("y", 1);
  b.node("If", {"flag"}, {"y"}, [&](onnx::NodeProto& n) {
    for (auto [key, act] :
         {std::pair{"then_branch", "Relu"}, std::pair{"else_branch", "Sigmoid"}}) {
      auto* a = n.add_attribute();
      a->set_name(key);
      a->set_type(onnx::AttributeProto::GRAPH);
      *a->mutable_g() = branch(act, key);
    }
  });
  const std::string bytes = b.bytes();
  const Tensor x = random_tensor({1, 3, 6, 6}, rng);
  for (bool flag : {true, false}) {
    Tensor f = Tensor::empty(DType::Bool, {});
    *f.data<bool>() = flag;
    Session s = Session::from_bytes(bytes.data(), bytes.size(), test_options());
    RunProfile profile;
    s.run({{"x", x}, {"flag", f}}, {}, {.profile = &profile});
    bool fused = false;
    for (const ProfileEvent& e : profile.events)
      fused |= e.op == (flag ? "Conv+Relu" : "Conv+Sigmoid");
    EXPECT_TRUE(fused) << flag;
    expect_same_as_unoptimized(bytes, {{"x", x}, {"flag", f}});
  }
}

// A fire module (SqueezeNet): two convolutions concatenated along the channels and read by the
// next convolution stay channels-last, the Concat along axis 3.
TEST(Passes, ChannelConcatStaysChannelsLast) {
  ModelBuilder b;
  std::mt19937 rng(10);
  b.input("x", 1, {2, 3, 6, 5}).output("y", 1, {2, 4, 6, 5});
  b.initializer("W1", {5, 3, 1, 1}, random_values(15, rng))
      .initializer("W2", {6, 3, 3, 3}, random_values(162, rng))
      .initializer("W3", {4, 11, 1, 1}, random_values(44, rng));
  b.node("Conv", {"x", "W1"}, {"a"});
  b.node("Conv", {"x", "W2"}, {"c"}, [](auto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  b.node("Concat", {"a", "c"}, {"cat"}, [](auto& n) { ModelBuilder::set_int(n, "axis", 1); });
  b.node("Conv", {"cat", "W3"}, {"y"});
  const std::string bytes = b.bytes();
  const Graph g = use_channels_last(load(bytes));
  for (const Node& n : g.nodes)
    if (n.op_type == "Concat") {
      EXPECT_EQ(n.attr_int("axis", 0), 3);
    }
  EXPECT_EQ(count_op(g, "Transpose"), 1);  // y leaves the region; nothing inside it
  expect_same_as_unoptimized(bytes, {{"x", random_tensor({2, 3, 6, 5}, rng)}});
}

TEST(Passes, ClipWithBoundsComputedAtRunTimeIsNotFused) {
  ModelBuilder b;
  std::mt19937 rng(2);
  b.input("x", 1, {1, 3, 5, 5}).input("hi", 1, {}).output("y", 1, {1, 2, 5, 5});
  b.initializer("W", {2, 3, 1, 1}, random_values(6, rng));
  b.node("Conv", {"x", "W"}, {"c"}).node("Clip", {"c", "", "hi"}, {"y"});
  EXPECT_EQ(count_op(fuse_conv_activation(load(b.bytes())), "Clip"), 1);
}

TEST(Passes, AddOfTwoConvolutionsIsFusedIntoOneOfThem) {
  // ResNet's downsampling block: Relu(Conv(a) + Conv(b)). Each Conv's only reader is the Add;
  // exactly one may absorb it (both did once, defining the output twice).
  ModelBuilder b;
  std::mt19937 rng(3);
  b.input("x", 1, {2, 4, 6, 6}).output("y", 1, {2, 8, 6, 6});
  b.initializer("W1", {8, 4, 1, 1}, random_values(32, rng))
      .initializer("W2", {8, 4, 3, 3}, random_values(288, rng));
  b.node("Conv", {"x", "W1"}, {"a"});
  b.node("Conv", {"x", "W2"}, {"c"}, [](auto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  b.node("Add", {"c", "a"}, {"s"}).node("Relu", {"s"}, {"y"});
  const std::string bytes = b.bytes();
  const Graph fused = fuse_conv_activation(load(bytes));
  EXPECT_EQ(count_op(fused, "Add"), 0);
  EXPECT_EQ(count_op(fused, "Conv"), 2);
  int producers = 0;
  for (const Node& n : fused.nodes) producers += n.outputs[0] == "y";
  EXPECT_EQ(producers, 1);
  const NamedValues feeds = {{"x", random_tensor({2, 4, 6, 6}, rng)}};
  expect_same_as_unoptimized(bytes, feeds);
  // Profiles name a fused node after what it fused.
  Session s = Session::from_bytes(bytes.data(), bytes.size(), test_options());
  RunProfile profile;
  RunOptions ro;
  ro.profile = &profile;
  s.run(feeds, {}, ro);
  std::vector<std::string> ops;
  for (const auto& e : profile.events) ops.push_back(e.op);
  EXPECT_NE(std::find(ops.begin(), ops.end(), "Conv+Add+Relu"), ops.end())
      << ::testing::PrintToString(ops);
}

TEST(Passes, FusedResidualWrittenInPlaceGivesTheSameResult) {
  // The residual dies at the Conv, so the output takes its buffer. Once with oneDNN (2-D) and
  // once with the reference loop (4 spatial dimensions), which must not read the residual after
  // writing the convolution over it.
  for (const bool four_d : {false, true}) {
    SCOPED_TRACE(four_d ? "reference loop" : "oneDNN");
    ModelBuilder b;
    std::mt19937 rng(8);
    const std::vector<int64_t> xs =
        four_d ? std::vector<int64_t>{1, 2, 3, 3, 3, 3} : std::vector<int64_t>{2, 2, 5, 5};
    const std::vector<int64_t> ws =
        four_d ? std::vector<int64_t>{2, 2, 1, 1, 1, 1} : std::vector<int64_t>{2, 2, 1, 1};
    b.input("x", 1, xs).input("r", 1, xs).output("y", 1, xs);
    b.initializer("W", ws, random_values(4, rng));
    b.node("Relu", {"r"}, {"rr"}).node("Conv", {"x", "W"}, {"c"}).node("Add", {"c", "rr"}, {"y0"});
    b.node("Sigmoid", {"y0"}, {"y"});
    const std::string bytes = b.bytes();
    EXPECT_EQ(count_op(fuse_conv_activation(load(bytes)), "Add"), 0);
    expect_same_as_unoptimized(
        bytes, {{"x", random_tensor(Shape(xs), rng)}, {"r", random_tensor(Shape(xs), rng)}});
  }
}

TEST(Passes, BatchNormFoldsIntoTheConvBeforeIt) {
  ModelBuilder b;
  std::mt19937 rng(5);
  b.input("x", 1, {2, 3, 7, 7}).output("y", 1, {2, 5, 7, 7}).output("u", 1, {2, 5, 7, 7});
  b.initializer("W", {5, 3, 3, 3}, random_values(135, rng))
      .initializer("B", {5}, random_values(5, rng))
      .initializer("scale", {5}, random_values(5, rng, 0.5f, 2))
      .initializer("shift", {5}, random_values(5, rng))
      .initializer("mean", {5}, random_values(5, rng))
      .initializer("var", {5}, random_values(5, rng, 0.1f, 3));
  b.node("Conv", {"x", "W", "B"}, {"c"}, [](auto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  b.node("BatchNormalization", {"c", "scale", "shift", "mean", "var"}, {"n"},
         [](auto& n) { ModelBuilder::set_float(n, "epsilon", 1e-3f); });
  b.node("Relu", {"n"}, {"y"});
  // A Conv without bias whose output is also read elsewhere is not folded.
  b.node("Conv", {"x", "W"}, {"c2"}, [](auto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  b.node("BatchNormalization", {"c2", "scale", "shift", "mean", "var"}, {"u"});
  b.node("Relu", {"c2"}, {"unused"});
  const std::string bytes = b.bytes();
  const Graph folded = fold_conv_batchnorm(load(bytes));
  EXPECT_EQ(count_op(folded, "BatchNormalization"), 1);
  EXPECT_EQ(folded.nodes[0].inputs[1], folded.nodes[0].name + "/W_bn_folded");
  expect_same_as_unoptimized(bytes, {{"x", random_tensor({2, 3, 7, 7}, rng)}});
}

TEST(Passes, ChannelsLastRegionSpansConvPoolAndElementwiseOps) {
  // x -> Conv+Relu -> MaxPool -> Conv (+ the pool as residual) -> *0.5 -> GlobalAveragePool,
  // with a plain reader (Reshape) and a graph output inside the region, and a 1-D Conv
  // (3-D weights) that stays outside it.
  ModelBuilder b;
  std::mt19937 rng(6);
  b.input("x", 1, {2, 3, 9, 9})
      .input("s", 1, {2, 3, 10})
      .output("g", 1, {2, 8, 1, 1})
      .output("r1", 1, {2, 8, 9, 9})
      .output("flat", 1, {2, 128})
      .output("sig", 1, {2, 8, 4, 4})
      .output("seq", 1, {2, 4, 10});
  b.initializer("W1", {8, 3, 3, 3}, random_values(216, rng))
      .initializer("B1", {8}, random_values(8, rng))
      .initializer("W2", {8, 8, 1, 1}, random_values(64, rng))
      .initializer("W3", {4, 3, 1}, random_values(12, rng))
      .initializer("half", {}, {0.5f});
  b.initializer_i64("flat_shape", {2}, {2, -1});
  b.node("Conv", {"x", "W1", "B1"}, {"c1"}, [](auto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  b.node("Relu", {"c1"}, {"r1"});
  b.node("MaxPool", {"r1"}, {"p"}, [](auto& n) {
    ModelBuilder::set_ints(n, "kernel_shape", {3, 3});
    ModelBuilder::set_ints(n, "strides", {2, 2});
  });
  b.node("Conv", {"p", "W2"}, {"c2"}).node("Add", {"c2", "p"}, {"a"});
  b.node("Mul", {"a", "half"}, {"m"}).node("Sigmoid", {"m"}, {"sig"});
  b.node("Reshape", {"m", "flat_shape"}, {"flat"});
  b.node("GlobalAveragePool", {"m"}, {"g"});
  b.node("Conv", {"s", "W3"}, {"seq"});
  const std::string bytes = b.bytes();
  const Graph g = use_channels_last(fuse_conv_activation(load(bytes)));
  int nhwc = 0;
  for (const Node& n : g.nodes) nhwc += n.attr_string("volt.layout", "") == "NHWC";
  EXPECT_EQ(nhwc, 4);  // two 2-D Convs, MaxPool, GlobalAveragePool; not the 1-D Conv
  // Out of the region: r1 (a graph output), m (for Reshape), sig, g. Into it, x needs none: the
  // first Conv reads it channels-first.
  EXPECT_EQ(count_op(g, "Transpose"), 4);
  for (const Node& n : g.nodes) {
    if (n.op_type == "MaxPool") {
      EXPECT_EQ(n.inputs[0], "r1/nhwc");  // no reorder before it
    }
    if (n.op_type == "Conv" && n.inputs[0] == "x") {
      EXPECT_EQ(n.attr_string("volt.input_layout", ""), "NCHW");
    }
  }
  expect_same_as_unoptimized(
      bytes, {{"x", random_tensor({2, 3, 9, 9}, rng)}, {"s", random_tensor({2, 3, 10}, rng)}});
}

TEST(Passes, DenseNetsBatchNormReluRunsChannelsLastAfterTheConcat) {
  // A dense layer: Concat(x', Conv(x')) -> BatchNormalization -> Relu -> Conv. The BN and Relu
  // become one node in the channels-last region: no Transpose between the convolutions. Once
  // more with the BN's statistics fed at run time (oneDNN's primitive, channels-last too).
  for (const bool fed_stats : {false, true}) {
    SCOPED_TRACE(fed_stats);
    ModelBuilder b;
    std::mt19937 rng(15);
    b.input("x", 1, {2, 4, 7, 7}).output("y", 1, {2, 5, 7, 7});
    b.initializer("W0", {4, 4, 3, 3}, random_values(144, rng))
        .initializer("W1", {4, 4, 1, 1}, random_values(16, rng))
        .initializer("W2", {5, 8, 1, 1}, random_values(40, rng));
    std::vector<float> var = random_values(8, rng);
    for (float& v : var) v = std::abs(v) + 0.1f;
    b.initializer("gamma", {8}, random_values(8, rng))
        .initializer("beta", {8}, random_values(8, rng));
    if (fed_stats)
      b.input("mean", 1, {8}).input("var", 1, {8});
    else
      b.initializer("mean", {8}, random_values(8, rng)).initializer("var", {8}, var);
    b.node("Conv", {"x", "W0"}, {"x1"}, [](auto& n) {
      ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
    });
    b.node("Conv", {"x1", "W1"}, {"f"});
    b.node("Concat", {"x1", "f"}, {"cat"}, [](auto& n) { ModelBuilder::set_int(n, "axis", 1); });
    b.node("BatchNormalization", {"cat", "gamma", "beta", "mean", "var"}, {"bn"});
    b.node("Relu", {"bn"}, {"r"}).node("Conv", {"r", "W2"}, {"y"});
    const std::string bytes = b.bytes();
    const Graph g = run_passes(load(bytes), test_options());
    EXPECT_EQ(count_op(g, "Relu"), 0);
    const Node* bn = nullptr;
    for (const Node& n : g.nodes)
      if (n.op_type == "BatchNormalization") bn = &n;
    ASSERT_TRUE(bn);
    EXPECT_EQ(bn->attr_string("volt.activation", ""), "Relu");
    EXPECT_EQ(bn->attr_string("volt.layout", ""), fed_stats ? "" : "NHWC");
    if (!fed_stats) {
      EXPECT_EQ(count_op(g, "Transpose"), 1);  // y, the graph output
    }
    NamedValues feeds = {{"x", random_tensor({2, 4, 7, 7}, rng)}};
    if (fed_stats) {
      feeds.emplace_back("mean", random_tensor({8}, rng));
      feeds.emplace_back("var", Tensor::from(var, {8}));
    }
    expect_same_as_unoptimized(bytes, feeds, 1e-4f);
  }
}

TEST(Passes, TensorFlowsTransposesAroundConvolutionsCostNothing) {
  // As tf2onnx writes a Keras network: NHWC input -> Transpose to NCHW -> Conv+Relu -> Transpose
  // to NHWC -> Transpose to NCHW -> Conv -> Transpose to NHWC (a graph output), and a ReduceMean
  // over H and W of the NHWC value between the convolutions. No Transpose of an image is left to
  // run: the graph output is an Identity of the second Conv's channels-last value, and the mean
  // is a GlobalAveragePool in the region whose [2, 5, 1, 1] result alone leaves it.
  ModelBuilder b;
  std::mt19937 rng(16);
  b.input("x", 1, {2, 6, 6, 3}).output("y", 1, {2, 6, 6, 4}).output("m", 1, {2, 5});
  b.initializer("W1", {5, 3, 3, 3}, random_values(135, rng))
      .initializer("W2", {4, 5, 1, 1}, random_values(20, rng));
  auto transpose = [&](const std::string& in, const std::string& out, std::vector<int64_t> perm) {
    b.node("Transpose", {in}, {out}, [&](auto& n) { ModelBuilder::set_ints(n, "perm", perm); });
  };
  transpose("x", "x_nchw", {0, 3, 1, 2});
  b.node("Conv", {"x_nchw", "W1"}, {"c1"}, [](auto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  b.node("Relu", {"c1"}, {"r1"});
  transpose("r1", "r1_nhwc", {0, 2, 3, 1});
  b.node("ReduceMean", {"r1_nhwc"}, {"m"}, [](auto& n) {
    ModelBuilder::set_ints(n, "axes", {1, 2});
    ModelBuilder::set_int(n, "keepdims", 0);
  });
  transpose("r1_nhwc", "r1_nchw", {0, 3, 1, 2});
  b.node("Conv", {"r1_nchw", "W2"}, {"c2"});
  transpose("c2", "y", {0, 2, 3, 1});
  const std::string bytes = b.bytes();
  const Graph g = run_passes(load(bytes), test_options());
  EXPECT_EQ(count_op(g, "Transpose"), 1);
  EXPECT_EQ(count_op(g, "GlobalAveragePool"), 1);
  EXPECT_EQ(count_op(g, "Identity"), 1);
  expect_same_as_unoptimized(bytes, {{"x", random_tensor({2, 6, 6, 3}, rng)}}, 1e-5f);
}

TEST(Passes, SliceRunsChannelsLastWithItsAxesRenumbered) {
  // Conv -> Slice -> Conv with the Slice's axes as opset 9 attributes, as constant inputs with
  // a negative axis and a step, and with no axes at all (starts for N, C, H): each stays in
  // the channels-last region (no Transpose but the output's) and gives the unoptimized answer.
  for (int form = 0; form < 3; ++form) {
    SCOPED_TRACE(form);
    ModelBuilder b(form == 0 ? 9 : 13);
    std::mt19937 rng(17);
    b.input("x", 1, {2, 3, 10, 10}).output_any("y", 1);
    b.initializer("W1", {6, 3, 3, 3}, random_values(162, rng))
        .initializer("W2", {4, 6, 1, 1}, random_values(24, rng));
    b.node("Conv", {"x", "W1"}, {"c1"}, [](auto& n) {
      ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
    });
    if (form == 0) {
      b.node("Slice", {"c1"}, {"s"}, [](auto& n) {
        ModelBuilder::set_ints(n, "axes", {2, 3});
        ModelBuilder::set_ints(n, "starts", {1, 2});
        ModelBuilder::set_ints(n, "ends", {9, 10});
      });
    } else if (form == 1) {
      b.initializer_i64("starts", {2}, {1, 2}).initializer_i64("ends", {2}, {9, 10});
      b.initializer_i64("axes", {2}, {-1, 2}).initializer_i64("steps", {2}, {2, 1});
      b.node("Slice", {"c1", "starts", "ends", "axes", "steps"}, {"s"});
    } else {
      b.initializer_i64("starts", {3}, {1, 0, 2}).initializer_i64("ends", {3}, {2, 6, 8});
      b.node("Slice", {"c1", "starts", "ends"}, {"s"});
    }
    b.node("Conv", {"s", "W2"}, {"y"});
    const std::string bytes = b.bytes();
    const Graph g = run_passes(load(bytes), test_options());
    EXPECT_EQ(count_op(g, "Transpose"), 1);
    expect_same_as_unoptimized(bytes, {{"x", random_tensor({2, 3, 10, 10}, rng)}}, 1e-5f);
  }
}

TEST(Passes, ChannelsLastConvFallsBackToTheReferenceLoop) {
  // An empty batch gives the Conv no oneDNN primitive: the reference loop runs on channels-last
  // storage through channels-first copies, and the shapes still come out right.
  ModelBuilder b;
  std::mt19937 rng(7);
  b.input("x", 1, {-1, 3, 5, 5}).output("y", 1, {-1, 2, 2, 2});
  b.initializer("W", {2, 3, 3, 3}, random_values(54, rng));
  b.node("Conv", {"x", "W"}, {"c"}).node("MaxPool", {"c"}, {"y"}, [](auto& n) {
    ModelBuilder::set_ints(n, "kernel_shape", {2, 2});
    ModelBuilder::set_ints(n, "strides", {1, 1});
  });
  const std::string bytes = b.bytes();
  expect_same_as_unoptimized(bytes, {{"x", random_tensor({3, 3, 5, 5}, rng)}});
  Session opt =
      Session::from_bytes(bytes.data(), bytes.size(), test_options({.optimization_level = 2}));
  const auto out = opt.run({{"x", Tensor::empty(DType::Float, {0, 3, 5, 5})}});
  EXPECT_EQ(out[0].tensor().shape(), (Shape{0, 2, 2, 2}));
}

// A small ResNet: stem Conv + MaxPool, a bottleneck block whose residual is a downsampling
// Conv, GlobalAveragePool and an AveragePool; with `mid` channels inside the block and a value
// of the region (the MaxPool) also a graph output.
std::string small_resnet(int64_t mid, std::mt19937& rng) {
  ModelBuilder b;
  b.input("x", 1, {-1, 3, 16, 16}).output("g", 1, {}).output("p", 1, {}).output("q", 1, {});
  auto w = [&](int64_t m, int64_t c, int64_t k) {
    return random_values(static_cast<size_t>(m * c * k * k), rng, -0.3f, 0.3f);
  };
  b.initializer("Ws", {32, 3, 3, 3}, w(32, 3, 3))
      .initializer("W1", {mid, 32, 1, 1}, w(mid, 32, 1))
      .initializer("W2", {mid, mid, 3, 3}, w(mid, mid, 3))
      .initializer("W3", {64, mid, 1, 1}, w(64, mid, 1))
      .initializer("Wd", {64, 32, 1, 1}, w(64, 32, 1));
  b.node("Conv", {"x", "Ws"}, {"s"}, [](auto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  b.node("Relu", {"s"}, {"sr"}).node("MaxPool", {"sr"}, {"p"}, [](auto& n) {
    ModelBuilder::set_ints(n, "kernel_shape", {2, 2});
    ModelBuilder::set_ints(n, "strides", {2, 2});
  });
  b.node("Conv", {"p", "W1"}, {"c1"}).node("Relu", {"c1"}, {"r1"});
  b.node("Conv", {"r1", "W2"}, {"c2"}, [](auto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  b.node("Relu", {"c2"}, {"r2"}).node("Conv", {"r2", "W3"}, {"c3"});
  b.node("Conv", {"p", "Wd"}, {"d"}).node("Add", {"c3", "d"}, {"a"}).node("Relu", {"a"}, {"r3"});
  b.node("GlobalAveragePool", {"r3"}, {"g"});
  // ceil_mode averaging that counts padding: oneDNN has no such pool, the reference loop runs.
  b.node("AveragePool", {"r3"}, {"q"}, [](auto& n) {
    ModelBuilder::set_ints(n, "kernel_shape", {3, 3});
    ModelBuilder::set_ints(n, "strides", {2, 2});
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
    ModelBuilder::set_int(n, "ceil_mode", 1);
    ModelBuilder::set_int(n, "count_include_pad", 1);
  });
  return b.bytes();
}

// In blocks of 16 channels on AVX-512 and of 8 on AVX2: the blocking oneDNN's convolutions
// choose for themselves on each.
std::string cpus_blocked_layout() {
  return blocked_layout_name(cpu_has_avx512() ? 16 : 8);
}

TEST(Passes, ResNetRegionIsStoredInTheCpusBlocksOfChannels) {
  std::mt19937 rng(31);
  const std::string bytes = small_resnet(16, rng);
  const Graph g = run_passes(load(bytes), test_options());
  int blocked = 0;
  for (const Node& n : g.nodes)
    blocked += n.domain == kOnnxDomain && n.attr_string("volt.layout", "") == cpus_blocked_layout();
  EXPECT_EQ(blocked, 8);                       // five Convs (one with the residual) and three pools
  EXPECT_EQ(count_op(g, "ChannelsFirst"), 3);  // p, g and q leave the region
  EXPECT_EQ(count_op(g, "Transpose"), 0);
  expect_same_as_unoptimized(bytes, {{"x", random_tensor({2, 3, 16, 16}, rng)}});
  // An empty batch: no primitive, the reference loops on channels-first copies of the blocks.
  Session opt = Session::from_bytes(bytes.data(), bytes.size(), test_options());
  const auto out = opt.run({{"x", Tensor::empty(DType::Float, {0, 3, 16, 16})}});
  EXPECT_EQ(out[0].tensor().shape(), (Shape{0, 64, 1, 1}));
  EXPECT_EQ(out[1].tensor().shape(), (Shape{0, 32, 8, 8}));
}

// An inception-style block: two branches of convolutions concatenated along the channels, then
// pooled. The Concat joins the blocked region (each input a contiguous run per image) and the
// model computes what the unoptimized graph computes, at batch 1 and 3.
// SqueezeNet's Fire modules: two expansions concatenated along channels, squeezed again by a
// 1x1 convolution (once through a MaxPool). The convolutions after the Concat take its parts
// instead (the first part's writes, the next adds to it), the pool runs on each part, and no
// Concat is left; a classifier with more output channels than the Concat has keeps it (the
// split would cost more than the copy). The same answer as the unoptimized graph, at two
// batches.
TEST(Passes, ChannelConcatBeforeConvolutionsIsNotMade) {
  std::mt19937 rng(41);
  ModelBuilder b;
  b.input("x", 1, {-1, 8, 11, 11}).output("y", 1, {}).output("z", 1, {});
  auto same = [](auto& n) { ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1}); };
  auto fire = [&](const std::string& in, int64_t c_in, const std::string& out) {
    const std::string p = out + "_";
    b.initializer(p + "Ws", {4, c_in, 1, 1}, random_values(4 * c_in, rng))
        .initializer(p + "Bs", {4}, random_values(4, rng))
        .initializer(p + "W1", {16, 4, 1, 1}, random_values(64, rng))
        .initializer(p + "B1", {16}, random_values(16, rng))
        .initializer(p + "W3", {16, 4, 3, 3}, random_values(576, rng))
        .initializer(p + "B3", {16}, random_values(16, rng));
    b.node("Conv", {in, p + "Ws", p + "Bs"}, {p + "s"}).node("Relu", {p + "s"}, {p + "sr"});
    b.node("Conv", {p + "sr", p + "W1", p + "B1"}, {p + "e1"}).node("Relu", {p + "e1"}, {p + "r1"});
    b.node("Conv", {p + "sr", p + "W3", p + "B3"}, {p + "e3"}, same)
        .node("Relu", {p + "e3"}, {p + "r3"});
    b.node("Concat", {p + "r1", p + "r3"}, {out},
           [](auto& n) { ModelBuilder::set_int(n, "axis", 1); });
  };
  fire("x", 8, "f1");
  b.node("MaxPool", {"f1"}, {"p1"}, [](auto& n) {
    ModelBuilder::set_ints(n, "kernel_shape", {3, 3});
    ModelBuilder::set_ints(n, "strides", {2, 2});
    ModelBuilder::set_int(n, "ceil_mode", 1);
  });
  fire("p1", 32, "f2");
  fire("f2", 32, "f3");
  b.initializer("Wy", {8, 32, 1, 1}, random_values(256, rng))
      .initializer("Wz", {40, 32, 1, 1}, random_values(1280, rng));
  b.node("Conv", {"f2", "Wy"}, {"y0"}).node("Relu", {"y0"}, {"y"});  // f2 read twice
  b.node("Conv", {"f3", "Wz"}, {"z"});  // 40 channels out of 32: the Concat stays
  const std::string bytes = b.bytes();
  const Graph g = run_passes(load(bytes), test_options());
  EXPECT_EQ(count_op(g, "Concat"), 1);
  EXPECT_EQ(count_op(g, "MaxPool"), 2);
  int summed = 0;
  for (const Node& n : g.nodes) summed += n.op_type == "Conv" && n.has_input(3);
  EXPECT_EQ(summed, 3);  // f1's squeeze (after the pool), f2's squeeze and Wy
  for (int64_t batch : {1, 3})
    expect_same_as_unoptimized(bytes, {{"x", random_tensor({batch, 8, 11, 11}, rng)}}, 1e-4f);
}

// A U-Net decoder: the upsampled map (ConvTranspose, groups of 2) concatenated with the skip
// connection, then a 3x3 convolution with half the channels: split as well.
TEST(Passes, UNetDecoderConcatIsSplitIntoTheConvolution) {
  std::mt19937 rng(43);
  ModelBuilder b;
  b.input("x", 1, {-1, 8, 5, 5}).input("skip", 1, {-1, 6, 10, 10}).output("y", 1, {});
  b.initializer("Wt", {8, 5, 2, 2}, random_values(160, rng))
      .initializer("Ws", {6, 6, 1, 1}, random_values(36, rng))
      .initializer("W", {8, 16, 3, 3}, random_values(8 * 16 * 9, rng))
      .initializer("B", {8}, random_values(8, rng));
  b.node("ConvTranspose", {"x", "Wt"}, {"up"}, [](auto& n) {
    ModelBuilder::set_ints(n, "strides", {2, 2});
    ModelBuilder::set_int(n, "group", 2);
  });
  b.node("Conv", {"skip", "Ws"}, {"s"}).node("Relu", {"s"}, {"sr"});
  b.node("Concat", {"up", "sr"}, {"cat"}, [](auto& n) { ModelBuilder::set_int(n, "axis", 1); });
  b.node("Conv", {"cat", "W", "B"}, {"c"}, [](auto& n) {
     ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
   }).node("Relu", {"c"}, {"y"});
  const std::string bytes = b.bytes();
  EXPECT_EQ(count_op(run_passes(load(bytes), test_options()), "Concat"), 0);
  for (int64_t batch : {1, 2})
    expect_same_as_unoptimized(bytes,
                               {{"x", random_tensor({batch, 8, 5, 5}, rng)},
                                {"skip", random_tensor({batch, 6, 10, 10}, rng)}},
                               1e-4f);
}

// x -> two 1x1 convolutions -> Concat "cat" along channels -> a 1x1 convolution "y".
void add_concat_of_two_convolutions(ModelBuilder& b, std::mt19937& rng) {
  b.input("x", 1, {1, 4, 6, 6});
  b.initializer("Wa", {8, 4, 1, 1}, random_values(32, rng))
      .initializer("Wb", {8, 4, 1, 1}, random_values(32, rng))
      .initializer("Wy", {2, 16, 1, 1}, random_values(32, rng));
  b.node("Conv", {"x", "Wa"}, {"a"}).node("Conv", {"x", "Wb"}, {"b"});
  b.node("Concat", {"a", "b"}, {"cat"}, [](auto& n) { ModelBuilder::set_int(n, "axis", 1); });
  b.node("Conv", {"cat", "Wy"}, {"y"});
}

// The parts the pass adds take names no value of the graph has: here the graph already has a
// value named as the first part of the split convolution's output would be.
TEST(Passes, SplitConvolutionPartsTakeUnusedNames) {
  std::mt19937 rng(44);
  ModelBuilder b;
  add_concat_of_two_convolutions(b, rng);
  b.node("Relu", {"x"}, {"y/part0"});
  b.output("y", 1, {}).output("y/part0", 1, {});
  const std::string bytes = b.bytes();
  EXPECT_EQ(count_op(run_passes(load(bytes), test_options()), "Concat"), 0);
  expect_same_as_unoptimized(bytes, {{"x", random_tensor({1, 4, 6, 6}, rng)}});
}

// A Concat that something other than a convolution or pool reads (here a graph output) is made.
TEST(Passes, ChannelConcatReadByOtherOpsIsMade) {
  std::mt19937 rng(42);
  ModelBuilder b;
  add_concat_of_two_convolutions(b, rng);
  b.output("cat", 1, {}).output("y", 1, {});
  const std::string bytes = b.bytes();
  EXPECT_EQ(count_op(run_passes(load(bytes), test_options()), "Concat"), 1);
  expect_same_as_unoptimized(bytes, {{"x", random_tensor({1, 4, 6, 6}, rng)}});
}

TEST(Passes, ConcatAlongChannelsJoinsTheBlockedRegion) {
  std::mt19937 rng(33);
  ModelBuilder b;
  b.input("x", 1, {-1, 8, 9, 9}).output("y", 1, {});
  b.initializer("W0", {16, 8, 3, 3}, random_values(16 * 8 * 9, rng))
      .initializer("W1", {16, 16, 1, 1}, random_values(16 * 16, rng))
      .initializer("W2", {32, 16, 3, 3}, random_values(32 * 16 * 9, rng));
  auto same = [](auto& n) { ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1}); };
  b.node("Conv", {"x", "W0"}, {"c0"}, same).node("Relu", {"c0"}, {"r0"});
  b.node("Conv", {"r0", "W1"}, {"c1"}).node("Relu", {"c1"}, {"r1"});
  b.node("Conv", {"r0", "W2"}, {"c2"}, same).node("Relu", {"c2"}, {"r2"});
  b.node("Concat", {"r1", "r2", "r0"}, {"cat"},
         [](auto& n) { ModelBuilder::set_int(n, "axis", 1); });
  b.node("MaxPool", {"cat"}, {"y"}, [](auto& n) {
    ModelBuilder::set_ints(n, "kernel_shape", {3, 3});
    ModelBuilder::set_ints(n, "strides", {2, 2});
  });
  const std::string bytes = b.bytes();
  const Graph g = run_passes(load(bytes), test_options());
  int concats = 0;
  for (const Node& n : g.nodes)
    concats += n.op_type == "Concat" && n.attr_string("volt.layout", "") == cpus_blocked_layout();
  EXPECT_EQ(concats, 1);
  EXPECT_EQ(count_op(g, "ChannelsFirst"), 1);
  for (int64_t batch : {1, 3})
    expect_same_as_unoptimized(bytes, {{"x", random_tensor({batch, 8, 9, 9}, rng)}});
}

// A segmentation-style head: the region's last convolution has 3 output channels, not whole
// blocks. It reads the region's blocks and writes channels-last (its exit stays a Transpose);
// the rest of the region is stored in blocks; the model computes what the unoptimized graph
// computes.
TEST(Passes, ALastConvolutionOfFewChannelsReadsBlocksAndWritesChannelsLast) {
  std::mt19937 rng(34);
  ModelBuilder b;
  b.input("x", 1, {-1, 8, 10, 10}).output("y", 1, {});
  b.initializer("W0", {16, 8, 3, 3}, random_values(16 * 8 * 9, rng))
      .initializer("W1", {3, 16, 1, 1}, random_values(3 * 16, rng));
  b.node("Conv", {"x", "W0"}, {"c0"}, [](auto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  b.node("Relu", {"c0"}, {"r0"}).node("Conv", {"r0", "W1"}, {"y"});
  const std::string bytes = b.bytes();
  const Graph g = run_passes(load(bytes), test_options());
  int blocked = 0, edge = 0;
  for (const Node& n : g.nodes) {
    blocked += n.attr_string("volt.layout", "") == cpus_blocked_layout();
    edge += n.attr_string("volt.layout", "") == "NHWC" &&
            n.attr_string("volt.input_layout", "") == cpus_blocked_layout();
  }
  EXPECT_EQ(blocked, 1);
  EXPECT_EQ(edge, 1);
  EXPECT_EQ(count_op(g, "ChannelsFirst"), 0);
  for (int64_t batch : {1, 2})
    expect_same_as_unoptimized(bytes, {{"x", random_tensor({batch, 8, 10, 10}, rng)}});
}

// A tf2onnx-style graph: its NHWC input goes through a Transpose to the first convolution, and a
// Transpose after each convolution and before the next. The first convolution reads the input
// channels-last from outside the region and writes blocks; the region takes blocks all through
// (before, the input kept the whole region channels-last, and each convolution reordered its X and
// Y into and out of blocks). The last convolution, whose output is the graph's NHWC output, reads
// blocks and writes channels-last.
TEST(Passes, ChannelsLastInputAndOutputLetTheRegionTakeBlocks) {
  std::mt19937 rng(36);
  ModelBuilder b;
  b.input("x", 1, {-1, 12, 12, 3}).output("y", 1, {});
  b.initializer("W0", {16, 3, 3, 3}, random_values(16 * 3 * 9, rng))
      .initializer("W1", {16, 16, 3, 3}, random_values(16 * 16 * 9, rng))
      .initializer("W2", {32, 16, 1, 1}, random_values(32 * 16, rng));
  auto padded = [](auto& n) { ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1}); };
  auto to_nchw = [](auto& n) { ModelBuilder::set_ints(n, "perm", {0, 3, 1, 2}); };
  auto to_nhwc = [](auto& n) { ModelBuilder::set_ints(n, "perm", {0, 2, 3, 1}); };
  b.node("Transpose", {"x"}, {"t0"}, to_nchw).node("Conv", {"t0", "W0"}, {"c0"}, padded);
  b.node("Relu", {"c0"}, {"r0"}).node("Transpose", {"r0"}, {"h0"}, to_nhwc);
  b.node("Transpose", {"h0"}, {"t1"}, to_nchw).node("Conv", {"t1", "W1"}, {"c1"}, padded);
  b.node("Transpose", {"c1"}, {"h1"}, to_nhwc).node("Transpose", {"h1"}, {"t2"}, to_nchw);
  b.node("Conv", {"t2", "W2"}, {"c2"}).node("Transpose", {"c2"}, {"y"}, to_nhwc);
  const std::string bytes = b.bytes();
  const Graph g = run_passes(load(bytes), test_options());
  int blocked = 0, reads_channels_last = 0;
  for (const Node& n : g.nodes) {
    if (n.op_type != "Conv") continue;
    blocked += n.attr_string("volt.layout", "") == cpus_blocked_layout();
    reads_channels_last += n.attr_string("volt.input_layout", "") == "NHWC";
  }
  EXPECT_EQ(blocked, 2);              // the last writes the NHWC output channels-last
  EXPECT_EQ(reads_channels_last, 1);  // the first
  EXPECT_EQ(count_op(g, "ChannelsFirst"), 0);
  // (The 16 -> 16 3x3 runs Winograd's F(4x4, 3x3), whose rounding, ~1e-6 of the layer's
  // largest values (tens), reaches the output through the 1x1's 16-term sums, where cancellation
  // leaves elements near 0.1: measured 1.5e-4 at most, so 1e-3. A wrong layout is off by O(1).)
  for (int64_t batch : {1, 2})
    expect_same_as_unoptimized(bytes, {{"x", random_tensor({batch, 12, 12, 3}, rng)}}, 1e-3f);
}

// A stack of strided 3x3 convolutions (no 1x1, none Winograd's): on AVX-512, oneDNN's brgemm
// convolutions on channels-last beat its blocked ones for them, and the region stays
// channels-last; on AVX2 it takes blocks. Either way it computes what the unoptimized graph does.
TEST(Passes, StridedThreeByThreeStacksStayChannelsLastOnAvx512) {
  std::mt19937 rng(35);
  ModelBuilder b;
  b.input("x", 1, {-1, 3, 20, 20}).output("y", 1, {});
  b.initializer("W0", {16, 3, 3, 3}, random_values(16 * 3 * 9, rng))
      .initializer("W1", {32, 16, 3, 3}, random_values(32 * 16 * 9, rng));
  auto strided = [](auto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
    ModelBuilder::set_ints(n, "strides", {2, 2});
  };
  b.node("Conv", {"x", "W0"}, {"c0"}, strided).node("Relu", {"c0"}, {"r0"});
  b.node("Conv", {"r0", "W1"}, {"c1"}, strided).node("Relu", {"c1"}, {"r1"});
  b.node("GlobalAveragePool", {"r1"}, {"y"});
  const std::string bytes = b.bytes();
  const Graph g = run_passes(load(bytes), test_options());
  int blocked = 0, channels_last = 0;
  for (const Node& n : g.nodes) {
    if (n.op_type == "ChannelsFirst")
      continue;  // the exit (blocks need one; [N, C, 1, 1] NHWC not)
    blocked += n.attr_string("volt.layout", "") == cpus_blocked_layout();
    channels_last += n.attr_string("volt.layout", "") == "NHWC";
  }
  EXPECT_EQ(blocked, cpu_has_avx512() ? 0 : 3);  // two Convs and the pool
  EXPECT_EQ(channels_last, cpu_has_avx512() ? 3 : 0);
  for (int64_t batch : {1, 2})
    expect_same_as_unoptimized(bytes, {{"x", random_tensor({batch, 3, 20, 20}, rng)}});
}

TEST(Passes, RegionWithChannelsNotInBlocksStaysChannelsLast) {
  std::mt19937 rng(32);
  const Graph g = run_passes(load(small_resnet(20, rng)), test_options());
  for (const Node& n : g.nodes) {
    EXPECT_NE(n.attr_string("volt.layout", ""), "NCHW16C");
    EXPECT_NE(n.attr_string("volt.layout", ""), "NCHW8C");
  }
  EXPECT_EQ(count_op(g, "ChannelsFirst"), 0);
}

TEST(Passes, WinogradIsChosenForThreeByThreeStrideOneConvolutions) {
  ModelBuilder b;
  std::mt19937 rng(9);
  b.input("x", 1, {2, 64, 12, 12})
      .output("y", 1, {2, 64, 12, 12})
      .output("z", 1, {2, 64, 6, 6})
      .output("few", 1, {2, 4, 12, 12});
  b.initializer("W", {64, 64, 3, 3}, random_values(64 * 64 * 9, rng))
      .initializer("B", {64}, random_values(64, rng))
      .initializer("W4", {4, 64, 3, 3}, random_values(4 * 64 * 9, rng));
  b.node("Conv", {"x", "W", "B"}, {"c"}, [](auto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  b.node("Relu", {"c"}, {"y"});
  b.node("Conv", {"x", "W"}, {"z"}, [](auto& n) {  // stride 2: direct
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
    ModelBuilder::set_ints(n, "strides", {2, 2});
  });
  b.node("Conv", {"x", "W4"}, {"few"}, [](auto& n) {  // 4 output channels: direct
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  const std::string bytes = b.bytes();
  const Graph g = prefer_winograd(load(bytes));
  EXPECT_EQ(g.nodes[0].attr_string("volt.algorithm", ""), "winograd");
  EXPECT_EQ(g.nodes[2].attr_string("volt.algorithm", ""), "");
  EXPECT_EQ(g.nodes[3].attr_string("volt.algorithm", ""), "");
  // Winograd against the direct convolution (level 0): sums of 576 products of values in
  // [-1, 1], transformed in 6×6 tiles; 1e-4 of the output's scale bounds its rounding.
  const NamedValues feeds = {{"x", random_tensor({2, 64, 12, 12}, rng)}};
  expect_same_as_unoptimized(bytes, feeds, 1e-4f);
  SessionOptions off = test_options();
  off.winograd = false;
  Session direct = Session::from_bytes(bytes.data(), bytes.size(), off);
  Session plain =
      Session::from_bytes(bytes.data(), bytes.size(), test_options({.optimization_level = 0}));
  // Both direct, but not the same oneDNN implementation (blocked layouts and fused ReLU on one
  // side, plain on the other): 576-term fp32 sums in different orders, whose rounding scales
  // with the terms, not with the (possibly cancelled) result; bounded by 2e-6 of the largest
  // output (~30 here: about 15 ulps of it).
  const auto d = direct.run(feeds), p = plain.run(feeds);
  const Tensor& ref = p[0].tensor();
  float scale = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) scale = std::max(scale, std::abs(ref.data<float>()[i]));
  for (int64_t i = 0; i < ref.numel(); ++i)
    ASSERT_NEAR(d[0].tensor().data<float>()[i], ref.data<float>()[i], 2e-6f * scale);
}

TEST(Passes, TransformerBlockFusesLayerNormGeluAndLinearEpilogues) {
  // x -> LayerNorm (decomposed as opset-13 exporters write it, gamma behind an Identity as
  // PyTorch leaves deduplicated weights) -> Linear -> GELU (Erf form) -> Linear -> + LN output.
  ModelBuilder b;
  std::mt19937 rng(10);
  b.input("x", 1, {2, 5, 8}).output("y", 1, {2, 5, 8});
  b.initializer("gamma_shared", {8}, random_values(8, rng, 0.5f, 1.5f))
      .initializer("beta", {8}, random_values(8, rng))
      .initializer("two", {}, {2.0f})
      .initializer("eps", {}, {1e-5f})
      .initializer("W1", {8, 16}, random_values(128, rng))
      .initializer("b1", {16}, random_values(16, rng))
      .initializer("W2", {16, 8}, random_values(128, rng))
      .initializer("b2", {8}, random_values(8, rng))
      .initializer("sqrt2", {}, {1.4142135f})
      .initializer("one", {}, {1.0f})
      .initializer("half", {}, {0.5f});
  auto last_axis = [](auto& n) { ModelBuilder::set_ints(n, "axes", {-1}); };
  b.node("Identity", {"gamma_shared"}, {"gamma"});
  b.node("ReduceMean", {"x"}, {"mean"}, last_axis).node("Sub", {"x", "mean"}, {"d"});
  b.node("Pow", {"d", "two"}, {"d2"}).node("ReduceMean", {"d2"}, {"var"}, last_axis);
  b.node("Add", {"var", "eps"}, {"ve"})
      .node("Sqrt", {"ve"}, {"sd"})
      .node("Div", {"d", "sd"}, {"nrm"});
  b.node("Mul", {"nrm", "gamma"}, {"scaled"}).node("Add", {"scaled", "beta"}, {"ln"});
  b.node("MatMul", {"ln", "W1"}, {"h0"}).node("Add", {"h0", "b1"}, {"h"});
  b.node("Div", {"h", "sqrt2"}, {"t"}).node("Erf", {"t"}, {"e"}).node("Add", {"e", "one"}, {"e1"});
  b.node("Mul", {"h", "e1"}, {"g0"}).node("Mul", {"g0", "half"}, {"g"});
  b.node("MatMul", {"g", "W2"}, {"o0"}).node("Add", {"o0", "b2"}, {"o"});
  b.node("Add", {"ln", "o"}, {"y"});
  const std::string bytes = b.bytes();
  const Graph g = fuse_matmul_epilogue(fuse_layer_norm(fuse_gelu(remove_identities(load(bytes)))));
  std::vector<std::string> ops;
  for (const Node& n : g.nodes) ops.push_back(n.op_type);
  EXPECT_EQ(ops, (std::vector<std::string>{"LayerNormalization", "MatMul", "MatMul"}));
  EXPECT_EQ(g.nodes[1].attr_string("volt.activation", ""), "Gelu");
  EXPECT_EQ(g.nodes[1].inputs, (std::vector<std::string>{"ln", "W1", "b1"}));
  EXPECT_EQ(g.nodes[2].inputs, (std::vector<std::string>{"g", "W2", "b2", "ln"}));
  expect_same_as_unoptimized(bytes, {{"x", random_tensor({2, 5, 8}, rng)}}, 1e-4f);
}

TEST(Passes, WrittenOutGeluFusesIntoTheConvolutionBeforeIt) {
  // wav2vec2's feature encoder: strided 1-D convolutions, each followed by GELU in its Erf form
  // (the exporters' opset 13): with every pass, the GELU is the convolution's post-op.
  ModelBuilder b;
  std::mt19937 rng(27);
  b.input("x", 1, {1, 32, 41}).output_any("y", 1);
  b.initializer("W", {32, 32, 3}, random_values(32 * 32 * 3, rng, -0.3f, 0.3f))
      .initializer("sqrt2", {}, {1.4142135f})
      .initializer("one", {}, {1.0f})
      .initializer("half", {}, {0.5f});
  b.node("Conv", {"x", "W"}, {"h"}, [](auto& n) { ModelBuilder::set_ints(n, "strides", {2}); });
  b.node("Div", {"h", "sqrt2"}, {"t"}).node("Erf", {"t"}, {"e"}).node("Add", {"e", "one"}, {"e1"});
  b.node("Mul", {"h", "e1"}, {"g0"}).node("Mul", {"g0", "half"}, {"y"});
  const std::string bytes = b.bytes();
  const Graph g = run_passes(load(bytes), test_options());
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op_type, "Conv");
  EXPECT_EQ(g.nodes[0].attr_string("volt.activation", ""), "Gelu");
  // Sums of 96 products of values below 0.3: float rounding in another order.
  expect_same_as_unoptimized(bytes, {{"x", random_tensor({1, 32, 41}, rng)}}, 1e-4f);
}

TEST(Passes, TanhGeluFormsFuseIntoTheLinearBeforeIt) {
  // GPT-2's GELU, 0.5 * h * (1 + tanh(sqrt(2/pi) * (h + 0.044715 * h^3))), in the forms exporters
  // write: h^3 as Pow or two Muls, the 0.5 on the product, on h or on the sum, constants first or
  // second. Each becomes the MatMul's GeluTanh post-op; a coefficient off by 10% fuses nothing.
  struct Form {
    bool pow_cube, constants_first;
    int half_on;  // 0: the product, 1: h, 2: the sum
    float cubic = 0.044715f;
  };
  for (const Form& f : {Form{true, false, 0}, Form{false, true, 0}, Form{false, false, 1},
                        Form{true, true, 2}, Form{false, false, 0, 0.049f}}) {
    ModelBuilder b;
    std::mt19937 rng(31);
    b.input("x", 1, {3, 8}).output_any("y", 1);
    b.initializer("W", {8, 16}, random_values(128, rng))
        .initializer("three", {}, {3.0f})
        .initializer("c", {}, {f.cubic})
        .initializer("k", {}, {0.7978845608f})
        .initializer("one", {}, {1.0f})
        .initializer("half", {}, {0.5f});
    auto mul = [&](const std::string& constant, const std::string& v, const std::string& out) {
      if (f.constants_first)
        b.node("Mul", {constant, v}, {out});
      else
        b.node("Mul", {v, constant}, {out});
    };
    b.node("MatMul", {"x", "W"}, {"h"});
    if (f.pow_cube) {
      b.node("Pow", {"h", "three"}, {"h3"});
    } else {
      b.node("Mul", {"h", "h"}, {"h2"}).node("Mul", {"h", "h2"}, {"h3"});
    }
    mul("c", "h3", "ch3");
    b.node("Add", {"h", "ch3"}, {"inner"});
    mul("k", "inner", "scaled");
    b.node("Tanh", {"scaled"}, {"t"});
    b.node("Add", {f.constants_first ? "one" : "t", f.constants_first ? "t" : "one"}, {"a"});
    if (f.half_on == 0) {
      b.node("Mul", {"h", "a"}, {"ha"});
      mul("half", "ha", "y");
    } else if (f.half_on == 1) {
      mul("half", "h", "hh");
      b.node("Mul", {"hh", "a"}, {"y"});
    } else {
      mul("half", "a", "ah");
      b.node("Mul", {"h", "ah"}, {"y"});
    }
    const std::string bytes = b.bytes();
    const Graph g = run_passes(load(bytes), test_options());
    const bool exact = f.cubic == 0.044715f;
    EXPECT_EQ(g.nodes.size(), exact ? 1u : 9u + (f.pow_cube ? 0u : 1u));
    EXPECT_EQ(g.nodes[0].attr_string("volt.activation", ""), exact ? "GeluTanh" : "");
    // Sums of 8 products of values in [-1, 1]; oneDNN's tanh GELU against the written-out one.
    expect_same_as_unoptimized(bytes, {{"x", random_tensor({3, 8}, rng)}}, 1e-5f);
  }
}

TEST(Passes, FusedLinearEpilogueWithBroadcastResidualAndCsrInput) {
  // The residual [8] broadcasts over the output: added after the product, not as a post-op.
  ModelBuilder b;
  std::mt19937 rng(11);
  b.input("x", 1, {3, 4}).input("r", 1, {8}).output("y", 1, {3, 8});
  b.initializer("W", {4, 8}, random_values(32, rng))
      .initializer("bias", {8}, random_values(8, rng));
  b.node("MatMul", {"x", "W"}, {"m"}).node("Add", {"m", "bias"}, {"mb"});
  b.node("Relu", {"mb"}, {"a"}).node("Add", {"a", "r"}, {"y"});
  const std::string bytes = b.bytes();
  EXPECT_EQ(fuse_matmul_epilogue(load(bytes)).nodes.size(), 1u);
  const Tensor x = random_tensor({3, 4}, rng), r = random_tensor({8}, rng);
  expect_same_as_unoptimized(bytes, {{"x", x}, {"r", r}});
  // The same x fed as CSR runs the sparse kernel, which applies the same epilogue.
  Session opt = Session::from_bytes(bytes.data(), bytes.size(), test_options());
  Session plain =
      Session::from_bytes(bytes.data(), bytes.size(), test_options({.optimization_level = 0}));
  const auto dense = plain.run({{"x", x}, {"r", r}});
  const auto sparse = opt.run({{"x", CsrTensor::from_dense(x)}, {"r", r}});
  for (int64_t i = 0; i < 24; ++i)
    EXPECT_NEAR(sparse[0].tensor().data<float>()[i], dense[0].tensor().data<float>()[i], 1e-5f);
}

TEST(Passes, ConstantScalarAfterAProductBecomesItsScale) {
  // Attention's scores: Q·Kᵀ / 8 (both operands computed), and a linear layer's product times a
  // scalar on the left, which goes into its weights instead; 1/8 is exact, 0.3 rounds, hence
  // the tolerance. Not folded: c / product (a reciprocal), and a [1, 1, 1] constant, which would
  // raise the result's rank.
  ModelBuilder b;
  std::mt19937 rng(14);
  b.input("q", 1, {2, 5, 4}).input("k", 1, {2, 4, 5}).input("x", 1, {3, 4});
  b.output("scores", 1, {2, 5, 5}).output("lin", 1, {3, 6}).output("inv", 1, {3, 6});
  b.output("raised", 1, {1, 3, 6});
  b.initializer("eight", {}, {8.0f}).initializer("c", {1}, {0.3f});
  b.initializer("ones", {1, 1, 1}, {1.0f}).initializer("W", {4, 6}, random_values(24, rng));
  b.node("MatMul", {"q", "k"}, {"qk"}).node("Div", {"qk", "eight"}, {"scores"});
  b.node("MatMul", {"x", "W"}, {"xw"}).node("Mul", {"c", "xw"}, {"lin"});
  b.node("MatMul", {"x", "W"}, {"xw2"}).node("Div", {"eight", "xw2"}, {"inv"});
  b.node("MatMul", {"x", "W"}, {"xw3"}).node("Mul", {"xw3", "ones"}, {"raised"});
  const std::string bytes = b.bytes();
  const Graph g = fuse_matmul_epilogue(load(bytes));
  EXPECT_EQ(count_op(g, "Div"), 1);
  EXPECT_EQ(count_op(g, "Mul"), 1);
  int scaled = 0, scaled_weights = 0;
  for (const Node& n : g.nodes) {
    if (n.op_type == "MatMul" && n.has_attr("volt.product_scale")) ++scaled;
    if (n.op_type == "MatMul" && n.inputs[1].find("scaled_weights") != std::string::npos)
      ++scaled_weights;
  }
  EXPECT_EQ(scaled, 1);
  EXPECT_EQ(scaled_weights, 1);
  const Tensor q = random_tensor({2, 5, 4}, rng), k = random_tensor({2, 4, 5}, rng),
               x = random_tensor({3, 4}, rng);
  expect_same_as_unoptimized(bytes, {{"q", q}, {"k", k}, {"x", x}}, 1e-5f);
  // x fed as CSR: the sparse kernel applies the scale too.
  Session opt = Session::from_bytes(bytes.data(), bytes.size(), test_options());
  const auto dense = opt.run({{"q", q}, {"k", k}, {"x", x}}, {"lin"});
  const auto sparse = opt.run({{"q", q}, {"k", k}, {"x", CsrTensor::from_dense(x)}}, {"lin"});
  for (int64_t i = 0; i < 18; ++i)
    EXPECT_NEAR(sparse[0].tensor().data<float>()[i], dense[0].tensor().data<float>()[i], 1e-5f);
}

// A ConvNeXt block after a stem Conv: depthwise Conv -> Transpose to NHWC -> LayerNorm ->
// Linear -> Relu -> Linear -> Transpose to NCHW -> layer scale [C, 1, 1] -> residual Add, then
// a per-channel shift [1, C, 1, 1] before the next Conv. The scale and the shift join the
// channels-last region as [C] constants, so no Transpose is left; the scale then goes into the
// second Linear's weights and bias, whose MatMul takes the residual Add too.
TEST(Passes, LayerScaleAfterALinearJoinsTheChannelsLastRegionAndItsWeights) {
  ModelBuilder b(17);
  std::mt19937 rng(21);
  b.input("x", 1, {2, 4, 6, 6}).output("y", 1, {2, 4, 6, 6});
  b.initializer("Wstem", {8, 4, 1, 1}, random_values(32, rng))
      .initializer("Wdw", {8, 1, 3, 3}, random_values(72, rng))
      .initializer("ln_scale", {8}, random_values(8, rng, 0.5f, 1.5f))
      .initializer("ln_bias", {8}, random_values(8, rng))
      .initializer("W1", {8, 16}, random_values(128, rng))
      .initializer("b1", {16}, random_values(16, rng))
      .initializer("W2", {16, 8}, random_values(128, rng))
      .initializer("b2", {8}, random_values(8, rng))
      .initializer("gamma", {8, 1, 1}, random_values(8, rng, 0.5f, 2))
      .initializer("shift", {1, 8, 1, 1}, random_values(8, rng))
      .initializer("Wout", {4, 8, 1, 1}, random_values(32, rng));
  b.node("Conv", {"x", "Wstem"}, {"s"});
  b.node("Conv", {"s", "Wdw"}, {"dw"}, [](auto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
    ModelBuilder::set_int(n, "group", 8);
  });
  b.node("Transpose", {"dw"}, {"t"}, [](auto& n) {
    ModelBuilder::set_ints(n, "perm", {0, 2, 3, 1});
  });
  b.node("LayerNormalization", {"t", "ln_scale", "ln_bias"}, {"ln"},
         [](auto& n) { ModelBuilder::set_int(n, "axis", -1); });
  b.node("MatMul", {"ln", "W1"}, {"h"}).node("Add", {"h", "b1"}, {"hb"});
  b.node("Relu", {"hb"}, {"hr"});
  b.node("MatMul", {"hr", "W2"}, {"o"}).node("Add", {"o", "b2"}, {"ob"});
  b.node("Transpose", {"ob"}, {"back"}, [](auto& n) {
    ModelBuilder::set_ints(n, "perm", {0, 3, 1, 2});
  });
  b.node("Mul", {"back", "gamma"}, {"scaled"}).node("Add", {"scaled", "s"}, {"res"});
  b.node("Add", {"shift", "res"}, {"shifted"});
  b.node("Conv", {"shifted", "Wout"}, {"y"});
  const std::string bytes = b.bytes();
  const Graph g = run_passes(load(bytes), test_options());
  // (The graph output y leaves the region through one.)
  EXPECT_EQ(count_op(g, "Transpose"), 1);
  EXPECT_EQ(count_op(g, "Mul"), 0);
  int residual_matmuls = 0;
  for (const Node& n : g.nodes)
    if (n.op_type == "MatMul" && n.inputs.size() == 4) ++residual_matmuls;
  EXPECT_EQ(residual_matmuls, 1);
  expect_same_as_unoptimized(bytes, {{"x", random_tensor({2, 4, 6, 6}, rng)}}, 1e-5f);
}

TEST(Passes, GemmTakesTheActivationAfterIt) {
  // Once with C as the primitive's bias, once with C scaled by beta (added after the product,
  // so the activation must come after it too).
  for (const float beta : {1.0f, 0.5f}) {
    SCOPED_TRACE(beta);
    ModelBuilder b;
    std::mt19937 rng(13);
    b.input("x", 1, {6, 10}).output("y", 1, {6, 7});
    b.initializer("W", {7, 10}, random_values(70, rng))
        .initializer("C", {7}, random_values(7, rng));
    b.node("Gemm", {"x", "W", "C"}, {"g"}, [&](auto& n) {
      ModelBuilder::set_int(n, "transB", 1);
      ModelBuilder::set_float(n, "beta", beta);
    });
    b.node("Relu", {"g"}, {"y"});
    const std::string bytes = b.bytes();
    const Graph g = fuse_matmul_epilogue(load(bytes));
    ASSERT_EQ(g.nodes.size(), 1u);
    EXPECT_EQ(g.nodes[0].attr_string("volt.activation", ""), "Relu");
    expect_same_as_unoptimized(bytes, {{"x", random_tensor({6, 10}, rng)}});
  }
}

TEST(Passes, Bf16PrecisionComputesConvAndLinearLayersInBf16) {
  // Conv -> Relu -> GlobalAveragePool -> Flatten -> MatMul(+bias): fp32 tensors throughout,
  // bf16 arithmetic in the Conv and the MatMul. bf16 keeps 8 bits of mantissa (relative
  // rounding 2^-9 per operand); over sums of 72 and 16 products the result stays within 2% in
  // relative L2 of fp32's (the bar for --precision bf16), and it must differ from fp32 at all,
  // or bf16 did not run.
  if (!cpu_has_bf16_kernels()) GTEST_SKIP() << "oneDNN has no bf16 kernels on this CPU";
  ModelBuilder b;
  std::mt19937 rng(12);
  b.input("x", 1, {4, 8, 10, 10}).output("y", 1, {4, 5});
  b.initializer("W", {16, 8, 3, 3}, random_values(16 * 8 * 9, rng))
      .initializer("M", {16, 5}, random_values(80, rng))
      .initializer("c", {5}, random_values(5, rng));
  b.node("Conv", {"x", "W"}, {"conv"}, [](auto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  b.node("Relu", {"conv"}, {"r"}).node("GlobalAveragePool", {"r"}, {"g"});
  b.node("Flatten", {"g"}, {"f"}).node("MatMul", {"f", "M"}, {"m"}).node("Add", {"m", "c"}, {"y"});
  const std::string bytes = b.bytes();
  const Graph g = use_bf16(load(bytes));
  EXPECT_EQ(g.nodes[0].attr_string("volt.compute", ""), "bf16");
  EXPECT_EQ(g.nodes[4].attr_string("volt.compute", ""), "bf16");
  const NamedValues feeds = {{"x", random_tensor({4, 8, 10, 10}, rng)}};
  Session fp32 = Session::from_bytes(bytes.data(), bytes.size(), test_options());
  SessionOptions o = test_options();
  o.precision = "bf16";
  Session bf16 = Session::from_bytes(bytes.data(), bytes.size(), o);
  const Tensor a = fp32.run(feeds)[0].tensor(), c = bf16.run(feeds)[0].tensor();
  ASSERT_EQ(c.dtype(), DType::Float);
  const double rel = relative_l2(a, c);
  EXPECT_LT(rel, 2e-2);
  EXPECT_GT(rel, 1e-6);
}

namespace {
// A ResNet bottleneck block after a stem convolution: c0 = Conv(x); y = Conv(Relu(Conv(Relu(
// Conv(c0))))) + c0, the middle one 3x3 over the first two of `spatial` spatial axes (5x5, then
// 2s).
// With `tap`, the first Relu's output is a graph output too.
std::string bottleneck(size_t spatial, bool tap, std::mt19937& rng) {
  ModelBuilder b;
  std::vector<int64_t> x{2, 8}, k0{8, 8}, k1{16, 8}, k3{16, 16}, k1b{8, 16}, pads(2 * spatial, 0);
  for (size_t i = 0; i < spatial; ++i) {
    x.push_back(i < 2 ? 5 : 2);
    for (auto* k : {&k0, &k1, &k1b}) k->push_back(1);
    k3.push_back(i < 2 ? 3 : 1);
  }
  pads[0] = pads[1] = pads[spatial] = pads[spatial + 1] = 1;  // "same" for the 3x3
  b.input("x", 1, x).output("y", 1, x);
  if (tap) b.output("r1", 1, {});
  b.initializer("W0", k0, random_values(numel_of(k0), rng))
      .initializer("W1", k1, random_values(numel_of(k1), rng))
      .initializer("W2", k3, random_values(numel_of(k3), rng))
      .initializer("W3", k1b, random_values(numel_of(k1b), rng));
  b.node("Conv", {"x", "W0"}, {"c0"});
  b.node("Conv", {"c0", "W1"}, {"c1"}).node("Relu", {"c1"}, {"r1"});
  b.node("Conv", {"r1", "W2"}, {"c2"}, [&](auto& n) { ModelBuilder::set_ints(n, "pads", pads); });
  b.node("Relu", {"c2"}, {"r2"}).node("Conv", {"r2", "W3"}, {"c3"});
  b.node("Add", {"c3", "c0"}, {"y"});
  return b.bytes();
}
}  // namespace

TEST(Passes, Bf16ConvolutionsHandTheirReadersBf16Outputs) {
  // Values only bf16 convolutions read go over in bf16. Read as X, the reader rounds them to bf16
  // anyway: the output must be the same bits as when the value stays fp32 (here by being a graph
  // output too). The stem's output is also the block's residual, added in fp32 after rounding:
  // within 2% of fp32 arithmetic (the bar for --precision bf16).
  if (!cpu_has_bf16_kernels()) GTEST_SKIP() << "oneDNN has no bf16 kernels on this CPU";
  std::mt19937 rng(21);
  const std::string chained = bottleneck(2, false, rng);
  std::mt19937 same(21);
  const std::string tapped = bottleneck(2, true, same);
  SessionOptions o = test_options();
  o.precision = "bf16";
  const Graph g = use_bf16(fuse_conv_activation(load(chained)));
  ASSERT_EQ(g.nodes.size(), 4u);
  EXPECT_EQ(g.nodes[0].attr_string("volt.output", ""), "bf16");  // read as X and as residual
  EXPECT_EQ(g.nodes[1].attr_string("volt.output", ""), "bf16");
  EXPECT_EQ(g.nodes[2].attr_string("volt.output", ""), "bf16");
  EXPECT_FALSE(g.nodes[3].has_attr("volt.output"));  // a graph output stays fp32
  const Graph t = use_bf16(fuse_conv_activation(load(tapped)));
  EXPECT_FALSE(t.nodes[1].has_attr("volt.output"));  // read by the Relu that is an output
  const NamedValues feeds = {{"x", random_tensor({2, 8, 5, 5}, rng)}};
  Session a = Session::from_bytes(chained.data(), chained.size(), o);
  Session b = Session::from_bytes(tapped.data(), tapped.size(), o);
  Session fp32 = Session::from_bytes(chained.data(), chained.size(), test_options());
  const Tensor ya = a.run(feeds)[0].tensor(), yb = b.run(feeds)[0].tensor();
  ASSERT_EQ(ya.dtype(), DType::Float);
  ASSERT_EQ(ya.nbytes(), yb.nbytes());
  EXPECT_EQ(std::memcmp(ya.raw(), yb.raw(), ya.nbytes()), 0);
  const double rel = relative_l2(fp32.run(feeds)[0].tensor(), ya);
  EXPECT_LT(rel, 2e-2);
  EXPECT_GT(rel, 1e-6);
}

TEST(Passes, Bf16ActivationsReachTheReferenceConvolution) {
  // Four spatial axes: no oneDNN primitive, so the reference loops get bf16 inputs with fp32
  // weights and write bf16 for the next convolution (where bf16 applies at all: see
  // cpu_has_bf16_kernels).
  if (!cpu_has_bf16_kernels()) GTEST_SKIP() << "oneDNN has no bf16 kernels on this CPU";
  std::mt19937 rng(22);
  const std::string bytes = bottleneck(4, false, rng);
  SessionOptions o = test_options();
  o.precision = "bf16";
  const NamedValues feeds = {{"x", random_tensor({2, 8, 5, 5, 2, 2}, rng)}};
  Session fp32 = Session::from_bytes(bytes.data(), bytes.size(), test_options());
  Session bf16 = Session::from_bytes(bytes.data(), bytes.size(), o);
  const Tensor y = bf16.run(feeds)[0].tensor();
  ASSERT_EQ(y.dtype(), DType::Float);
  const double rel = relative_l2(fp32.run(feeds)[0].tensor(), y);
  EXPECT_LT(rel, 2e-2);
  EXPECT_GT(rel, 1e-6);  // the values between the layers were rounded to bf16
}

// An inverted-residual block as MobileNetV2 has it: 1×1 expansion + ReLU6 (or none, as in its
// first block), depthwise 3×3 + activation, 1×1 projection (+ the block's input); after a 3×3
// convolution, as in a network (the first convolution reads its input channels-first and is
// not fused). EfficientNet's has Swish (x * Sigmoid(x)) after both.
struct InvertedBlock {
  int64_t n, c, e, h, w, stride;
  std::vector<int64_t> pads;  // top, left, bottom, right
  bool biases;
  const char* activation;  // after the depthwise convolution
  bool expand, residual;
  const char* expand_activation = "Clip";  // ReLU6
};

// `op` (or Swish written out as x * Sigmoid(x)) from `in` to `out`.
void activation_node(ModelBuilder& b, const std::string& op, const std::string& in,
                     const std::string& out) {
  if (op == "Swish") {
    b.node("Sigmoid", {in}, {out + "_gate"}).node("Mul", {in, out + "_gate"}, {out});
    return;
  }
  const std::vector<std::string> inputs =
      op == "Clip" ? std::vector<std::string>{in, "lo", "hi"} : std::vector<std::string>{in};
  b.node(op, inputs, {out}, [&](auto& n) {
    if (op == "LeakyRelu") ModelBuilder::set_float(n, "alpha", 0.1f);
  });
}

std::string inverted_block(const InvertedBlock& p, std::mt19937& rng) {
  const int64_t m = p.residual ? p.c : 8;
  ModelBuilder b;
  b.input("x", 1, {-1, p.c, p.h, p.w}).output("y", 1, {});
  auto values = [&](int64_t count, float scale = 1) {
    return random_values(static_cast<size_t>(count), rng, -scale, scale);
  };
  b.initializer("W1", {p.e, p.c, 1, 1}, values(p.e * p.c))
      .initializer("B1", {p.e}, values(p.e))
      .initializer("W2", {p.e, 1, 3, 3}, values(p.e * 9))
      .initializer("B2", {p.e}, values(p.e))
      .initializer("W3", {m, p.e, 1, 1}, values(m * p.e, 0.1f))
      .initializer("B3", {m}, values(m))
      .initializer("Ws", {p.c, p.c, 3, 3}, values(p.c * p.c * 9, 0.3f))
      .initializer("lo", {}, {0.0f})
      .initializer("hi", {}, {6.0f});
  b.node("Conv", {"x", "Ws"}, {"s"}, [](auto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  auto conv = [&](std::vector<std::string> in, const char* bias) {
    if (p.biases) in.push_back(bias);
    return in;
  };
  if (p.expand) {
    b.node("Conv", conv({"s", "W1"}, "B1"), {"e"});
    activation_node(b, p.expand_activation, "e", "r");
  }
  b.node("Conv", conv({p.expand ? "r" : "s", "W2"}, "B2"), {"d"}, [&](auto& n) {
    ModelBuilder::set_int(n, "group", p.e);
    ModelBuilder::set_ints(n, "kernel_shape", {3, 3});
    ModelBuilder::set_ints(n, "strides", {p.stride, p.stride});
    ModelBuilder::set_ints(n, "pads", p.pads);
  });
  activation_node(b, p.activation, "d", "a");
  b.node("Conv", conv({"a", "W3"}, "B3"), {p.residual ? "p" : "y"});
  if (p.residual) b.node("Add", {"p", "s"}, {"y"});
  return b.bytes();
}

TEST(Passes, DepthwiseBlockRunsAsOneKernel) {
  // Whole-batch (small) and strip-by-strip (a wide tensor over 8 MiB, 1 MiB with threads)
  // execution; strides 1 and 2, asymmetric padding, odd sizes, one image split into bands across
  // threads and several images across them; with and without biases, expansion and residual; any
  // activation oneDNN takes as post-op.
  const std::vector<InvertedBlock> blocks = {
      {2, 8, 48, 15, 15, 1, {1, 1, 1, 1}, true, "Relu", true, true},
      {3, 8, 32, 13, 11, 2, {1, 0, 1, 1}, false, "LeakyRelu", true, false},
      {1, 16, 256, 96, 96, 2, {1, 1, 1, 1}, true, "Relu", true, false},
      {3, 8, 256, 64, 64, 1, {1, 1, 1, 1}, false, "LeakyRelu", true, true},
      {2, 8, 512, 65, 33, 2, {0, 1, 1, 0}, true, "Relu", true, false},
      {2, 96, 96, 112, 112, 1, {1, 1, 1, 1}, true, "Relu", false, false},
      {2, 16, 16, 9, 9, 1, {1, 1, 1, 1}, false, "Relu", false, true},
      // Swish and Sigmoid: volt's own pass over what the primitives wrote, where it has one
      {2, 8, 48, 15, 15, 1, {1, 1, 1, 1}, true, "Swish", true, true, "Swish"},
      {1, 16, 256, 96, 96, 2, {1, 1, 1, 1}, true, "Swish", true, false, "Sigmoid"},
      {3, 8, 256, 64, 64, 1, {1, 1, 1, 1}, false, "Sigmoid", true, true, "Swish"},
  };
  std::mt19937 rng(21);
  for (const InvertedBlock& p : blocks) {
    SCOPED_TRACE("block " + std::to_string(p.n) + "x" + std::to_string(p.e) + "x" +
                 std::to_string(p.h) + "x" + std::to_string(p.w) + " stride " +
                 std::to_string(p.stride) + (p.expand ? " expand" : "") +
                 (p.residual ? " residual" : ""));
    const std::string bytes = inverted_block(p, rng);
    const Graph g = run_passes(load(bytes), test_options());
    EXPECT_EQ(count_op(g, "DepthwiseBlock"), 1);
    EXPECT_EQ(count_op(g, "Conv"), 1);  // the first
    // Sums of up to 256 products of values in [-1, 1]: the same arithmetic as unfused, blocked
    // differently.
    expect_same_as_unoptimized(bytes, {{"x", random_tensor({p.n, p.c, p.h, p.w}, rng)}}, 1e-4f);
  }
  // A second batch size, a second plan: the weights the first plan's kernel kept packed copies of
  // (the model's own were dropped) are rebuilt from them.
  const InvertedBlock p = blocks[0];
  const std::string bytes = inverted_block(p, rng);
  Session opt = Session::from_bytes(bytes.data(), bytes.size(), test_options());
  Session plain =
      Session::from_bytes(bytes.data(), bytes.size(), test_options({.optimization_level = 0}));
  for (int64_t n : {p.n, p.n + 1}) {
    const NamedValues feeds = {{"x", random_tensor({n, p.c, p.h, p.w}, rng)}};
    const Tensor a = plain.run(feeds)[0].tensor(), b = opt.run(feeds)[0].tensor();
    ASSERT_EQ(a.shape(), b.shape());
    for (int64_t i = 0; i < a.numel(); ++i)
      ASSERT_NEAR(a.data<float>()[i], b.data<float>()[i],
                  1e-4f * std::max(1.0f, std::abs(a.data<float>()[i])));
  }
}

TEST(Passes, DepthwiseBlockTakesABareDepthwiseConvolutionWhoseActivationVoltApplies) {
  // EfficientNet's first block: a depthwise 3x3 + Swish after the stem (no 1x1 before it) and
  // read by more than a projection. Where volt applies Swish itself, the convolution runs in
  // strips as a block of its own and each strip's rows get the activation while in cache; a
  // ReLU stays a Conv with its post-op.
  FusedActivation swish;
  swish.kind = FusedActivation::Kind::Swish;
  auto model = [](const std::string& activation, int64_t c, std::mt19937& rng) {
    ModelBuilder b;
    b.input("x", 1, {-1, 3, -1, -1}).output_any("y", 1).output_any("g", 1);
    b.initializer("Ws", {c, 3, 3, 3}, random_values(static_cast<size_t>(c * 27), rng))
        .initializer("Wd", {c, 1, 3, 3}, random_values(static_cast<size_t>(c * 9), rng))
        .initializer("Bd", {c}, random_values(static_cast<size_t>(c), rng));
    b.node("Conv", {"x", "Ws"}, {"s"}, [](auto& n) {
      ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
    });
    b.node("Conv", {"s", "Wd", "Bd"}, {"d"}, [&](auto& n) {
      ModelBuilder::set_int(n, "group", c);
      ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
    });
    activation_node(b, activation, "d", "y");
    b.node("GlobalAveragePool", {"y"}, {"g"});
    return b.bytes();
  };
  std::mt19937 rng(26);
  const std::string relu = model("Relu", 16, rng);
  EXPECT_EQ(count_op(run_passes(load(relu), test_options()), "DepthwiseBlock"), 0);
  // 2 x 32 x 112 x 112 is 3.2 MB: strips, one image a thread; 1 x 16 x 9 x 9 the whole batch.
  for (auto [c, n, size] : {std::tuple{32, 2, 112}, std::tuple{16, 1, 9}}) {
    SCOPED_TRACE(std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(size));
    const std::string bytes = model("Swish", c, rng);
    EXPECT_EQ(count_op(run_passes(load(bytes), test_options()), "DepthwiseBlock"),
              has_own_activation(swish) ? 1 : 0);
    // Sums of 27 and 9 products of values in [-1, 1]: float rounding, another order.
    expect_same_as_unoptimized(bytes, {{"x", random_tensor({n, 3, size, size}, rng)}}, 1e-4f);
  }
}

// A squeeze-and-excitation block as EfficientNet's: x -> Conv (c channels) -> depthwise 3x3 (the
// region stays channels-last) -> GlobalAveragePool -> 1x1 Relu -> 1x1 Sigmoid (the gate S) ->
// Mul(depthwise, S) -> 1x1 projection to m channels (+ the block's input when m == c).
std::string squeeze_excitation_block(int64_t c, int64_t m, bool residual, std::mt19937& rng) {
  auto values = [&](int64_t n, float scale) {
    auto v = random_values(static_cast<size_t>(n), rng);
    for (auto& e : v) e *= scale;
    return v;
  };
  const int64_t squeezed = std::max<int64_t>(c / 4, 1);
  ModelBuilder b;
  b.input("x", 1, {-1, c, -1, -1}).output_any("y", 1);
  b.initializer("Ws", {c, c, 1, 1}, values(c * c, 0.3f))
      .initializer("Wd", {c, 1, 3, 3}, values(c * 9, 0.5f))
      .initializer("W1", {squeezed, c, 1, 1}, values(squeezed * c, 0.5f))
      .initializer("B1", {squeezed}, values(squeezed, 0.1f))
      .initializer("W2", {c, squeezed, 1, 1}, values(c * squeezed, 0.5f))
      .initializer("B2", {c}, values(c, 0.1f))
      .initializer("Wp", {m, c, 1, 1}, values(m * c, 0.2f))
      .initializer("Bp", {m}, values(m, 0.1f));
  b.node("Conv", {"x", "Ws"}, {"s"});
  b.node("Conv", {"s", "Wd"}, {"d"}, [&](auto& n) {
    ModelBuilder::set_int(n, "group", c);
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  b.node("GlobalAveragePool", {"d"}, {"g"});
  b.node("Conv", {"g", "W1", "B1"}, {"f1"}).node("Relu", {"f1"}, {"r1"});
  b.node("Conv", {"r1", "W2", "B2"}, {"f2"}).node("Sigmoid", {"f2"}, {"gate"});
  b.node("Mul", {"d", "gate"}, {"scaled"});
  b.node("Conv", {"scaled", "Wp", "Bp"}, {residual ? "p" : "y"});
  if (residual) b.node("Add", {"p", "s"}, {"y"});
  return b.bytes();
}

TEST(Passes, ChannelScaleFoldsIntoTheConvolutionAfterIt) {
  // The weights scaled per image (more pixels than output channels) and X scaled (fewer), with
  // and without a residual, one image and several.
  struct Case {
    int64_t c, m, size, batch;
    bool residual;
  };
  std::mt19937 rng(23);
  for (const Case k : {Case{24, 24, 12, 1, true}, Case{40, 16, 9, 3, false},
                       Case{32, 96, 5, 2, false}, Case{48, 48, 3, 3, true}}) {
    SCOPED_TRACE(std::to_string(k.c) + " -> " + std::to_string(k.m) + " channels, " +
                 std::to_string(k.size) + "x" + std::to_string(k.size) + ", batch " +
                 std::to_string(k.batch));
    const std::string bytes = squeeze_excitation_block(k.c, k.m, k.residual, rng);
    const Graph g = run_passes(load(bytes), test_options());
    EXPECT_EQ(count_op(g, "ScaledPointwiseConv"), 1);
    EXPECT_EQ(count_op(g, "Mul"), 0);
    // Sums of up to 48 products of values below 1, in another order: float rounding.
    expect_same_as_unoptimized(bytes, {{"x", random_tensor({k.batch, k.c, k.size, k.size}, rng)}},
                               1e-4f);
  }
}

TEST(Passes, ChannelScaleServesPlansOfBothModesInOneSession) {
  // A first plan on small images scales X and packs W (which the session may then drop: the
  // packed copy restores it); a plan for larger images scales W itself; then small again.
  std::mt19937 rng(25);
  const std::string bytes = squeeze_excitation_block(24, 24, true, rng);
  Session opt = Session::from_bytes(bytes.data(), bytes.size(), test_options());
  Session plain =
      Session::from_bytes(bytes.data(), bytes.size(), test_options({.optimization_level = 0}));
  for (int64_t size : {5, 24, 5, 26}) {
    const NamedValues feeds = {{"x", random_tensor({2, 24, size, size}, rng)}};
    const Tensor a = plain.run(feeds)[0].tensor(), b = opt.run(feeds)[0].tensor();
    ASSERT_EQ(a.shape(), b.shape());
    for (int64_t i = 0; i < a.numel(); ++i)
      ASSERT_NEAR(a.data<float>()[i], b.data<float>()[i],
                  1e-4f * std::max(1.0f, std::abs(a.data<float>()[i])))
          << size << "x" << size << " at " << i;
  }
}

TEST(Passes, ChannelScaleStaysWhereItIsNotOnePerImageAndChannel) {
  // Three Muls stay: by a full-size value (not a gate made from a GlobalAveragePool), by a gate
  // with no 1x1 convolution to tell its channels, and by a true gate whose product is also a
  // graph output (the convolution cannot take it in).
  std::mt19937 rng(24);
  ModelBuilder b;
  b.input("x", 1, {1, 8, 6, 6}).output("y", 1, {}).output("z", 1, {});
  b.output("v", 1, {}).output("gated", 1, {});
  for (const char* w : {"Ws", "Wp", "Wq", "Wr", "Wg"})
    b.initializer(w, {8, 8, 1, 1}, random_values(64, rng));
  b.initializer("Wd", {8, 1, 3, 3}, random_values(72, rng));
  b.node("Conv", {"x", "Ws"}, {"s"});
  b.node("Conv", {"s", "Wd"}, {"d"}, [](auto& n) {
    ModelBuilder::set_int(n, "group", 8);
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  b.node("Mul", {"d", "s"}, {"full"}).node("Conv", {"full", "Wp"}, {"y"});
  b.node("GlobalAveragePool", {"d"}, {"g"}).node("Sigmoid", {"g"}, {"bare"});
  b.node("Mul", {"d", "bare"}, {"scaled"}).node("Conv", {"scaled", "Wq"}, {"z"});
  b.node("Conv", {"g", "Wg"}, {"c"}).node("Sigmoid", {"c"}, {"gate"});
  b.node("Mul", {"d", "gate"}, {"gated"}).node("Conv", {"gated", "Wr"}, {"v"});
  const std::string bytes = b.bytes();
  const Graph g = run_passes(load(bytes), test_options());
  EXPECT_EQ(count_op(g, "ScaledPointwiseConv"), 0);
  EXPECT_EQ(count_op(g, "Mul"), 3);
  expect_same_as_unoptimized(bytes, {{"x", random_tensor({1, 8, 6, 6}, rng)}}, 1e-4f);
}

TEST(Passes, DepthwiseBlockTakesOnlyValuesNothingElseReads) {
  std::mt19937 rng(22);
  ModelBuilder b;
  b.input("x", 1, {1, 4, 6, 6}).output("y", 1, {}).output("e", 1, {});
  b.initializer("Ws", {4, 4, 1, 1}, random_values(16, rng))
      .initializer("W1", {16, 4, 1, 1}, random_values(64, rng))
      .initializer("W2", {16, 1, 3, 3}, random_values(144, rng));
  b.node("Conv", {"x", "Ws"}, {"s"}).node("Conv", {"s", "W1"}, {"e"});
  b.node("Conv", {"e", "W2"}, {"y"}, [](auto& n) {
    ModelBuilder::set_int(n, "group", 16);
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  const std::string bytes = b.bytes();  // e is a graph output, y has no projection
  EXPECT_EQ(count_op(run_passes(load(bytes), test_options()), "DepthwiseBlock"), 0);
  SessionOptions bf16 = test_options();
  bf16.precision = "bf16";
  const InvertedBlock block = {1, 4, 16, 6, 6, 1, {1, 1, 1, 1}, true, "Relu", true, true};
  EXPECT_EQ(count_op(run_passes(load(inverted_block(block, rng)), bf16), "DepthwiseBlock"), 0);
}

TEST(Passes, ModelsMayNotSetVoltAttributes) {
  // Opset 21: past what the ONNX checker of Debian's libonnx knows, so volt's own check speaks.
  ModelBuilder b(21, 10);
  b.input("x", 1, {1, 1, 3, 3}).output("y", 1, {1, 1, 3, 3}).initializer("W", {1, 1, 1, 1}, {1});
  b.node("Conv", {"x", "W"}, {"y"},
         [](auto& n) { ModelBuilder::set_string(n, "volt.layout", "NHWC"); });
  const std::string bytes = b.bytes();
  EXPECT_VOLT_ERROR(Session::from_bytes(bytes.data(), bytes.size()), InvalidModel, "volt.layout",
                    "reserved");
}

}  // namespace
}  // namespace volt

namespace volt {
namespace {

// precision=fp16: weights and constants in half, float inputs cast on entry and outputs cast
// back, so the caller sees the declared float types.
TEST(UseFp16, ConvertsWeightsAndCastsAtTheBoundary) {
  ModelBuilder b(17);
  b.input("x", 1, {2, 3})
      .initializer("w", {3, 4}, std::vector<float>(12, 0.1f))
      .output("y", 1, {2, 4})
      .node("MatMul", {"x", "w"}, {"m"})
      .node("Cast", {"m"}, {"c"}, [](onnx::NodeProto& n) { ModelBuilder::set_int(n, "to", 1); })
      .node("Relu", {"c"}, {"y"});
  const Graph g = use_fp16(load(b.bytes()), Fp16Weights::ConvertOnce);
  EXPECT_EQ(g.initializers.at("w").dtype(), DType::Float16);
  EXPECT_FLOAT_EQ(static_cast<float>(g.initializers.at("w").data<Float16>()[0]),
                  static_cast<float>(Float16(0.1f)));
  int casts_to_half = 0, casts_to_float = 0;
  for (const Node& n : g.nodes) {
    if (n.op_type == "MatMul") {
      EXPECT_EQ(n.inputs[0], "x@fp16");
    }
    if (n.op_type == "Relu") {
      EXPECT_EQ(n.outputs[0], "y@fp16");
    }
    if (n.op_type != "Cast") continue;
    const auto to = static_cast<DType>(n.attr_int("to"));
    casts_to_half += to == DType::Float16;
    casts_to_float += to == DType::Float;
    if (to == DType::Float) {
      EXPECT_EQ(n.outputs[0], "y");
    }
  }
  EXPECT_EQ(casts_to_half, 2);   // the input's, and the model's own Cast retargeted
  EXPECT_EQ(casts_to_float, 1);  // the output's
}

// For mixed-precision training: the fp32 weights stay (the optimizer updates them) and are cast
// where they are read; a table read only by Gather is cast after the Gather, rows only.
TEST(UseFp16, CastsWeightsEachRunForTraining) {
  ModelBuilder b(17);
  b.input("ids", 7, {2})
      .initializer("table", {5, 3}, std::vector<float>(15, 0.5f))
      .initializer("w", {3, 4}, std::vector<float>(12, 0.1f))
      .output("y", 1, {2, 4})
      .node("Gather", {"table", "ids"}, {"rows"})
      .node("MatMul", {"rows", "w"}, {"y"});
  const Graph g = use_fp16(load(b.bytes()), Fp16Weights::CastEachRun);
  EXPECT_EQ(g.initializers.at("w").dtype(), DType::Float);
  EXPECT_EQ(g.initializers.at("table").dtype(), DType::Float);
  std::map<std::string, std::string> cast_of;  // cast output -> its input
  for (const Node& n : g.nodes) {
    if (n.op_type == "Gather") {
      EXPECT_EQ(n.inputs[0], "table");
      EXPECT_EQ(n.outputs[0], "rows@fp32");
    }
    if (n.op_type == "MatMul") {
      EXPECT_EQ(n.inputs[0], "rows");
      EXPECT_EQ(n.inputs[1], "w@fp16");
    }
    if (n.op_type == "Cast") cast_of[n.outputs[0]] = n.inputs[0];
  }
  EXPECT_EQ(cast_of["w@fp16"], "w");
  EXPECT_EQ(cast_of["rows"], "rows@fp32");
  EXPECT_EQ(cast_of["y"], "y@fp16");  // back to the declared fp32
}

// BatchNormalization normalizes in fp32: its scale, bias and statistics stay fp32 in both modes,
// no longer tied to X's type (as opset 15's schema has it).
TEST(UseFp16, KeepsBatchNormParametersInFp32) {
  ModelBuilder b(14);
  b.input("x", 1, {2, 3, 4, 4}).output("y", 1, {2, 3, 4, 4});
  for (const char* p : {"scale", "bias", "mean", "var"})
    b.initializer(p, {3}, std::vector<float>(3, 1.0f));
  b.node("BatchNormalization", {"x", "scale", "bias", "mean", "var"}, {"y"});
  for (Fp16Weights mode : {Fp16Weights::ConvertOnce, Fp16Weights::CastEachRun}) {
    const Graph g = use_fp16(load(b.bytes()), mode);
    for (const char* p : {"scale", "bias", "mean", "var"})
      EXPECT_EQ(g.initializers.at(p).dtype(), DType::Float) << p;
    for (const Node& n : g.nodes)
      if (n.op_type == "BatchNormalization") {
        EXPECT_EQ(n.inputs[0], "x@fp16");
        EXPECT_EQ(n.inputs[1], "scale");
        ASSERT_GE(n.input_type_group.size(), 5u);
        for (size_t i = 1; i <= 4; ++i) EXPECT_EQ(n.input_type_group[i], -1) << i;
      }
  }
}

// A CSR input that an accelerator's MatMul reads moves to the device as it is (cuSPARSE
// multiplies it); when any device reader needs it dense, the host densifies it first.
TEST(DensifySparseInputs, KeepsCsrThroughTheCopyToADeviceThatMultipliesIt) {
  ModelBuilder b(17);
  b.input("x", 1, {4, 3})
      .initializer("w", {3, 2}, std::vector<float>(6, 0.5f))
      .output("y", 1, {4, 2})
      .node("MatMul", {"x", "w"}, {"y"});
  const Graph placed = place_on_device(load(b.bytes()), Device{Device::Kind::Cuda, 0},
                                       [](const Node& n) { return n.op_type == "MatMul"; });
  auto copy_input = [](const Graph& g) {
    for (const Node& n : g.nodes)
      if (n.op_type == "CopyToDevice" && n.inputs[0].rfind("x", 0) == 0) return n.inputs[0];
    return std::string("none");
  };
  const Graph kept = densify_sparse_inputs(placed, {"x"}, {"x"});
  EXPECT_EQ(copy_input(kept), "x");
  for (const Node& n : kept.nodes) EXPECT_NE(n.op_type, "Densify");

  Graph also_relu = placed;  // a second device reader that needs x dense
  for (const Node& n : placed.nodes)
    if (n.op_type == "MatMul")
      also_relu.nodes.push_back(make_node("r", "Relu", {n.inputs[0]}, {"r"}, 13));
  also_relu.nodes.back().device = "cuda";
  const Graph densified = densify_sparse_inputs(also_relu, {"x"}, {"x"});
  EXPECT_EQ(copy_input(densified), "x/densified");
}

// Runs `g` on the CPU as it is (no passes) with inputs by name; returns output 0.
Tensor run_graph(const Graph& g, const NamedValues& feeds) {
  GraphRunner runner(std::make_shared<const Graph>(g), "test", "cpu", 1);
  std::vector<const Value*> fed(runner.compiled().names.size(), nullptr);
  for (const auto& [name, v] : feeds) fed[runner.compiled().id(name)] = &v;
  return runner.run(fed)[0].tensor();
}

// Attention as exporters write it (Kᵀ by a Transpose, a scale, a broadcast mask) becomes one
// ai.volt Attention node reading K, and computes what the pattern did; without the scale and
// mask, and with Kᵀ read as it is, too.
TEST(FuseAttention, ScaledMaskedSoftmaxAttentionBecomesOneNode) {
  for (bool full : {true, false}) {
    ModelBuilder b(17);
    b.input("q", 1, {2, 3, 4, 5})
        .input("k", 1, {2, 3, 6, 5})
        .input("v", 1, {2, 3, 6, 7})
        .input("mask", 1, {2, 1, 1, 6})
        .initializer("c", {}, {std::sqrt(5.0f)})
        .output("y", 1, {2, 3, 4, 7})
        .node("Transpose", {"k"}, {"kt"}, [](onnx::NodeProto& n) {
          ModelBuilder::set_ints(n, "perm", {0, 1, 3, 2});
        });
    if (full) {
      b.node("MatMul", {"q", "kt"}, {"s"})
          .node("Div", {"s", "c"}, {"s2"})
          .node("Add", {"s2", "mask"}, {"s3"})
          .node("Softmax", {"s3"}, {"p"});
    } else {
      b.node("MatMul", {"q", "kt"}, {"s"}).node("Softmax", {"s"}, {"p"});
      b.node("Identity", {"kt"}, {"kt_out"}).output("kt_out", 1, {2, 3, 5, 6});  // Kᵀ stays
    }
    b.node("MatMul", {"p", "v"}, {"y"});
    const Graph g = load(b.bytes());
    const Graph fused = fuse_attention(g);
    int attention = 0, softmax = 0;
    for (const Node& n : fused.nodes) {
      softmax += n.op_type == "Softmax";
      if (n.op_type != "Attention") continue;
      ++attention;
      EXPECT_EQ(n.inputs[1], full ? "k" : "kt");
      EXPECT_EQ(n.attr_int("k_transposed"), full ? 0 : 1);
      EXPECT_NEAR(n.attr_float("scale", 0.f), full ? 1 / std::sqrt(5.0f) : 1.0f, 1e-7f);
      EXPECT_EQ(n.inputs.size(), full ? 4u : 3u);
    }
    EXPECT_EQ(attention, 1);
    EXPECT_EQ(softmax, 0);
    std::mt19937 rng(5);
    Tensor mask = random_tensor({2, 1, 1, 6}, rng);
    mask.data<float>()[3] = -10000.f;  // a masked key
    const NamedValues feeds = {{"q", random_tensor({2, 3, 4, 5}, rng)},
                               {"k", random_tensor({2, 3, 6, 5}, rng)},
                               {"v", random_tensor({2, 3, 6, 7}, rng)},
                               {"mask", mask}};
    const Tensor want = run_graph(g, feeds), got = run_graph(fused, feeds);
    ASSERT_EQ(want.shape(), got.shape());
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5f) << full << " " << i;
  }
}

// fp16 on an accelerator keeps convolution regions channels-last (cuDNN's tensor cores read
// NHWC without transposing), and the layout attributes do not keep those nodes on the host.
TEST(UseFp16, ConvolutionsOnAnAcceleratorStayChannelsLast) {
  ModelBuilder b(17);
  b.input("x", 1, {1, 3, 8, 8})
      .initializer("w1", {8, 3, 3, 3}, std::vector<float>(216, 0.1f))
      .initializer("w2", {8, 8, 1, 1}, std::vector<float>(64, 0.1f))
      .output("y", 1, {1, 8, 4, 4})
      .node("Conv", {"x", "w1"}, {"c1"},
            [](onnx::NodeProto& n) {
              ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
            })
      .node("Relu", {"c1"}, {"r"})
      .node("Conv", {"r", "w2"}, {"c2"})
      .node("MaxPool", {"c2"}, {"y"}, [](onnx::NodeProto& n) {
        ModelBuilder::set_ints(n, "kernel_shape", {2, 2});
        ModelBuilder::set_ints(n, "strides", {2, 2});
      });
  const Graph g =
      run_passes(load(b.bytes()), SessionOptions{.device = "cuda:0", .precision = "fp16"});
  int channels_last = 0;
  for (const Node& n : g.nodes) channels_last += n.attr_string("volt.layout", "") == "NHWC";
  EXPECT_EQ(channels_last, 3);  // both convolutions and the pool
  const Graph placed =
      place_on_device(g, Device{Device::Kind::Cuda, 0}, [](const Node&) { return true; });
  for (const Node& n : placed.nodes) {
    if (n.op_type == "Conv" || n.op_type == "MaxPool") {
      EXPECT_EQ(n.device, "cuda") << n.name;
    }
  }
}

TEST(UseFp16, IsRefusedOnTheCpu) {
  ModelBuilder b(17);
  b.input("x", 1, {3}).output("y", 1, {3}).node("Relu", {"x"}, {"y"});
  const std::string bytes = b.bytes();
  EXPECT_THROW(Session::from_bytes(bytes.data(), bytes.size(), {.precision = "fp16"}), Error);
}

// A decoder's present keys and values, written as PyTorch exports them (per layer, the keys and
// values are the past's slices concatenated with the new ones, stacked; then the layers
// stacked), become one concatenation of the past with the stacked new entries, and each layer's
// keys and values slices of its stack: the past is copied once, not three times. Layer 1's new
// entries depend on what layer 0 read of its keys, so the stack of the layers cannot come
// before them: the present reads the past and the new entries itself. Where the slices are not
// the stack's parts in order, or the past holds more layers than the stack, that level stays as
// it is. Every form computes what the unoptimized graph does, at three past lengths.
TEST(Passes, StackedConcatenationsOfThePastBecomeOne) {
  struct Case {
    int opset;
    bool slice_first;   // Concat(past slice, new) rather than Concat(new, past slice)
    int64_t axis;       // the keys' concatenation axis, as written
    int64_t layers;     // the past's layers (the present stacks 2)
    bool values_first;  // each layer stacks (values, keys): slices out of order
  };
  const Case cases[] = {{13, true, 2, 2, false},
                        {11, false, -2, 2, false},
                        {13, true, 2, 3, false},
                        {13, true, 2, 2, true}};
  std::mt19937 rng(19);
  for (const Case& k : cases) {
    SCOPED_TRACE(::testing::Message() << "opset " << k.opset << " layers " << k.layers
                                      << (k.values_first ? " values first" : ""));
    ModelBuilder b(k.opset);
    b.input("x", 1, {1, 2, 1, 4}).input("past", 1, {k.layers, 2, 1, 2, -1, 4});
    b.output("y", 1, {1, 2, 1, 4}).output("present", 1, {2, 2, 1, 2, -1, 4});
    b.initializer_i64("i0", {}, {0}).initializer_i64("i1", {}, {1});
    b.initializer_i64("axis0", {1}, {0});
    b.initializer("ck", {1}, {0.5f}).initializer("cv", {1}, {0.25f});
    auto unsqueeze = [&](const std::string& in, const std::string& out) {
      if (k.opset >= 13) {
        b.node("Unsqueeze", {in, "axis0"}, {out});
      } else {
        b.node("Unsqueeze", {in}, {out}, [](auto& n) { ModelBuilder::set_ints(n, "axes", {0}); });
      }
    };
    auto concat = [&](std::vector<std::string> ins, const std::string& out, int64_t axis) {
      b.node("Concat", ins, {out}, [axis](auto& n) { ModelBuilder::set_int(n, "axis", axis); });
    };
    std::string h = "x";
    for (int i = 0; i < 2; ++i) {
      const std::string l = std::string{"l"} + std::to_string(i) + "_";
      b.node("Mul", {h, "ck"}, {l + "k"}).node("Add", {h, "cv"}, {l + "v"});
      b.node("Gather", {"past", i == 0 ? "i0" : "i1"}, {l + "past"});
      for (const char* kv : {"k", "v"}) {
        const std::string slice = l + "past_" + kv;
        b.node("Gather", {l + "past", std::string(kv) == "k" ? "i0" : "i1"}, {slice});
        concat(k.slice_first ? std::vector<std::string>{slice, l + kv}
                             : std::vector<std::string>{l + kv, slice},
               l + kv + "_all", k.axis);
        unsqueeze(l + kv + "_all", l + kv + "_1");
      }
      concat(k.values_first ? std::vector<std::string>{l + "v_1", l + "k_1"}
                            : std::vector<std::string>{l + "k_1", l + "v_1"},
             l + "stack", 0);
      unsqueeze(l + "stack", l + "stack_1");
      // What the layer reads of its keys and values: the next layer's input.
      b.node("Transpose", {l + "k_all"}, {l + "kt"}, [](auto& n) {
        ModelBuilder::set_ints(n, "perm", {0, 1, 3, 2});
      });
      b.node("MatMul", {h, l + "kt"}, {l + "scores"});
      h = i == 1 ? "y" : l + "out";
      b.node("MatMul", {l + "scores", l + "v_all"}, {h});
    }
    concat({"l0_stack_1", "l1_stack_1"}, "present", 0);
    const std::string bytes = b.bytes();
    const Graph g = run_passes(load(bytes), test_options());
    auto producer = [&](const std::string& v) -> const Node* {
      for (const Node& n : g.nodes)
        if (std::find(n.outputs.begin(), n.outputs.end(), v) != n.outputs.end()) return &n;
      return nullptr;
    };
    const Node* present = producer("present");
    ASSERT_NE(present, nullptr);
    ASSERT_EQ(present->op_type, "Concat");
    const bool stacks_rewritten = !k.values_first;
    const bool layers_rewritten = stacks_rewritten && k.layers == 2;
    EXPECT_EQ(present->inputs[k.slice_first ? 0 : 1] == "past", layers_rewritten);
    for (const char* kv : {"l0_k_all", "l1_v_all"}) {
      ASSERT_NE(producer(kv), nullptr);
      EXPECT_EQ(producer(kv)->op_type, stacks_rewritten ? "Gather" : "Concat") << kv;
    }
    for (const int64_t length : {3, 1, 6})
      expect_same_as_unoptimized(bytes,
                                 {{"x", random_tensor({1, 2, 1, 4}, rng)},
                                  {"past", random_tensor({k.layers, 2, 1, 2, length, 4}, rng)}});
  }
}

}  // namespace
}  // namespace volt
