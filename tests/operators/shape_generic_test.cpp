// Plans built for one of several input shapes (InferContext::shapes_vary) avoid oneDNN code
// generated for the exact shape: convolutions run the primitive of a bucket of widths on a copy
// of X widened with zeros (width_buckets.hpp; with AVX-512, these small ones run as one packed
// product over their gathered windows instead, conv_as_product.hpp), a stem over few channels
// volt's direct loop (conv_few_channels.hpp), 2-D max pools over stored channels run volt's loop,
// the region's exit from blocks to channels-first volt's gather (no reorder made per shape). Each
// width they compute what a fresh session (its first plan: primitives for the exact shape)
// computes: channels-last or blocked regions, strides, dilations, asymmetric pads, a padded pool, a
// bias and a fused ReLU, and auto_pad (which keeps exact-shape primitives).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "model_builder.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;
using testing::uniform_values;

TEST(ShapeGeneric, ConvBucketsAndPoolLoopsComputeWhatFreshSessionsDo) {
  std::mt19937 rng(41);
  ModelBuilder b;
  b.input("x", 1, {1, 3, 12, -1});
  b.initializer("W1", {16, 3, 3, 3}, uniform_values(rng, 16 * 3 * 9))
      .initializer("B1", {16}, uniform_values(rng, 16))
      .initializer("W2", {32, 16, 3, 3}, uniform_values(rng, 32 * 16 * 9))
      .initializer("W3", {16, 32, 3, 3}, uniform_values(rng, 16 * 32 * 9));
  b.node("Conv", {"x", "W1", "B1"}, {"c1"}, [](auto& n) {
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  b.node("Relu", {"c1"}, {"r1"});
  b.node("MaxPool", {"r1"}, {"p1"}, [](auto& n) {
    ModelBuilder::set_ints(n, "kernel_shape", {2, 2});
    ModelBuilder::set_ints(n, "strides", {2, 2});
  });
  b.node("Conv", {"p1", "W2"}, {"c2"}, [](auto& n) {
    ModelBuilder::set_ints(n, "strides", {1, 2});
    ModelBuilder::set_ints(n, "dilations", {1, 2});
    ModelBuilder::set_ints(n, "pads", {1, 2, 1, 0});
  });
  b.node("MaxPool", {"c2"}, {"p2"}, [](auto& n) {
    ModelBuilder::set_ints(n, "kernel_shape", {3, 3});
    ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
  });
  b.node("Conv", {"p2", "W3"}, {"c3"},
         [](auto& n) { ModelBuilder::set_string(n, "auto_pad", "SAME_UPPER"); });
  b.output_any("c3", 1);
  const std::string bytes = b.bytes();
  Session varying = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t w : {40, 13, 77, 130, 9, 64, 13}) {
    Tensor x = Tensor::empty(DType::Float, {1, 3, 12, w});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
    Session fresh = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
    const Tensor want = fresh.run({{"x", x}})[0].tensor();
    RunProfile profile;
    const Tensor got = varying.run({{"x", x}}, {}, {.profile = &profile})[0].tensor();
    for (const ProfileEvent& e : profile.events) EXPECT_EQ(e.reference, "") << e.node << " " << w;
    ASSERT_EQ(got.shape(), want.shape()) << "width " << w;
    // (The stem's 27 taps are summed in another order than oneDNN's by volt's loop
    // (conv_few_channels.hpp): rounding apart, 5e-7, which the Winograd convolution after it
    // amplifies to 2e-4. A column out of place is off by the values themselves.)
    for (int64_t i = 0; i < got.numel(); ++i)
      ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i],
                  1e-3f * (1.0f + std::abs(want.data<float>()[i])))
          << "width " << w << " at " << i;
  }
}

// Attention's scores Q K^T from two computed values, the keys read transposed through a folded
// Transpose, at a first length and then at others (plans for several shapes: K^T gathered into
// plain rows in tiles of 16, whole and cut, before oneDNN's gemm). Against the sums in float64.
TEST(ShapeGeneric, ProductsWithTransposedComputedKeysMatchTheSumAtEachLength) {
  std::mt19937 rng(43);
  const int64_t heads = 3, depth = 20;
  ModelBuilder b;
  b.input("q", 1, {-1, heads, depth}).input("k", 1, {-1, heads, depth}).output_any("y", 1);
  b.node("Transpose", {"q"}, {"qh"}, [](auto& n) { ModelBuilder::set_ints(n, "perm", {1, 0, 2}); });
  b.node("Transpose", {"k"}, {"kt"}, [](auto& n) { ModelBuilder::set_ints(n, "perm", {1, 2, 0}); });
  b.node("MatMul", {"qh", "kt"}, {"y"});
  const std::string bytes = b.bytes();
  Session s = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
  for (const int64_t len : {5, 17, 1, 40, 33}) {
    SCOPED_TRACE("length " + std::to_string(len));
    const std::vector<float> q = uniform_values(rng, static_cast<size_t>(len * heads * depth));
    const std::vector<float> k = uniform_values(rng, static_cast<size_t>(len * heads * depth));
    auto tensor = [&](const std::vector<float>& v) {
      Tensor t = Tensor::empty(DType::Float, {len, heads, depth});
      std::copy(v.begin(), v.end(), t.data<float>());
      return t;
    };
    const Tensor y = s.run({{"q", tensor(q)}, {"k", tensor(k)}})[0].tensor();
    ASSERT_EQ(y.shape(), (Shape{heads, len, len}));
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < len; ++i)
        for (int64_t j = 0; j < len; ++j) {
          double sum = 0.0;
          for (int64_t d = 0; d < depth; ++d)
            sum += static_cast<double>(q[(i * heads + h) * depth + d]) *
                   k[(j * heads + h) * depth + d];
          // Sums of 20 products of values in [-1, 1], in fp32.
          ASSERT_NEAR(y.data<float>()[(h * len + i) * len + j], sum, 1e-5 * (1 + std::abs(sum)))
              << "head " << h << ", row " << i << ", column " << j;
        }
  }
}

// Products of two computed operands in plans for several shapes run on volt's packed kernel with
// B packed at each run (packed_product.hpp, AVX-512; oneDNN's gemm elsewhere), reading A and
// writing Y through folded Transposes: attention's weighting of the values (B and Y transposed
// back), scores with a scale folded in, batch axes broadcast from both operands, a depth past the
// kernel's 256 with a width that leaves part of a block of 32, a decoder's one query row. Each
// shape computes what a fresh session without graph rewrites computes (oneDNN's matmul for the
// exact shape, the Transposes apart), within 2e-6 of the sum of the terms' magnitudes.
TEST(ShapeGeneric, ProductsOfComputedOperandsMatchPlainSessionsAtEachShape) {
  struct Case {
    std::string name;
    std::function<void(ModelBuilder&)> build;
    std::function<std::vector<std::pair<std::string, Shape>>(int64_t)> inputs;
  };
  auto perm = [](std::vector<int64_t> p) {
    return [p](auto& n) { ModelBuilder::set_ints(n, "perm", p); };
  };
  const std::vector<Case> cases = {
      {"values weighted",
       [&](ModelBuilder& b) {
         b.input("p", 1, {2, 3, -1, -1}).input("v", 1, {2, -1, 3, 16}).output_any("y", 1);
         b.node("Transpose", {"v"}, {"vh"}, perm({0, 2, 1, 3}));
         b.node("MatMul", {"p", "vh"}, {"o"});
         b.node("Transpose", {"o"}, {"y"}, perm({0, 2, 1, 3}));
       },
       [](int64_t l) {
         return std::vector<std::pair<std::string, Shape>>{{"p", {2, 3, l, l}},
                                                           {"v", {2, l, 3, 16}}};
       }},
      {"scaled scores",
       [&](ModelBuilder& b) {
         b.input("q", 1, {1, -1, 4, 24}).input("k", 1, {1, -1, 4, 24}).output_any("y", 1);
         b.initializer("scale", {}, {0.125f});
         b.node("Transpose", {"q"}, {"qh"}, perm({0, 2, 1, 3}));
         b.node("Transpose", {"k"}, {"kt"}, perm({0, 2, 3, 1}));
         b.node("MatMul", {"qh", "kt"}, {"s"});
         b.node("Mul", {"s", "scale"}, {"y"});
       },
       [](int64_t l) {
         return std::vector<std::pair<std::string, Shape>>{{"q", {1, l, 4, 24}},
                                                           {"k", {1, l, 4, 24}}};
       }},
      {"broadcast batches",
       [&](ModelBuilder& b) {
         b.input("a", 1, {2, 1, -1, 40}).input("b", 1, {1, 3, 40, -1}).output_any("y", 1);
         b.node("MatMul", {"a", "b"}, {"y"});
       },
       [](int64_t l) {
         return std::vector<std::pair<std::string, Shape>>{{"a", {2, 1, l, 40}},
                                                           {"b", {1, 3, 40, l + 3}}};
       }},
      {"deep",
       [&](ModelBuilder& b) {
         b.input("a", 1, {-1, 300}).input("b", 1, {300, 45}).output_any("y", 1);
         b.node("MatMul", {"a", "b"}, {"y"});
       },
       [](int64_t l) {
         return std::vector<std::pair<std::string, Shape>>{{"a", {l, 300}}, {"b", {300, 45}}};
       }},
      {"one query",
       [&](ModelBuilder& b) {
         b.input("q", 1, {4, 1, 64}).input("k", 1, {4, -1, 64}).output_any("y", 1);
         b.node("Transpose", {"k"}, {"kt"}, perm({0, 2, 1}));
         b.node("MatMul", {"q", "kt"}, {"y"});
       },
       [](int64_t l) {
         return std::vector<std::pair<std::string, Shape>>{{"q", {4, 1, 64}}, {"k", {4, l, 64}}};
       }},
  };
  std::mt19937 rng(47);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ModelBuilder b;
    c.build(b);
    const std::string bytes = b.bytes();
    Session varying = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
    for (const int64_t len : {7, 33, 1, 70, 33}) {  // (the first: the session's one-shape plan)
      SCOPED_TRACE("length " + std::to_string(len));
      std::vector<std::pair<std::string, Value>> feeds;
      for (const auto& [name, shape] : c.inputs(len)) {
        Tensor t = Tensor::empty(DType::Float, shape);
        const std::vector<float> v = uniform_values(rng, static_cast<size_t>(t.numel()));
        std::copy(v.begin(), v.end(), t.data<float>());
        feeds.emplace_back(name, t);
      }
      const Tensor got = varying.run(feeds)[0].tensor();
      // (A fresh session each time: its one plan is for this shape alone.)
      Session plain = Session::from_bytes(bytes.data(), bytes.size(), {.optimization_level = 0});
      const Tensor want = plain.run(feeds)[0].tensor();
      ASSERT_EQ(got.shape(), want.shape());
      // (Values in [-1, 1]: a sum of at most 300 terms of magnitude at most 1.)
      for (int64_t i = 0; i < got.numel(); ++i)
        ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 2e-6f * 300) << "at " << i;
    }
  }
}

// A channels-first to channels-last Transpose in plans for several shapes: strided_gather's
// tiled transpose, in pieces of 1024 rows (whole and cut) and 256 columns across the threads.
// A copy: every element exact.
TEST(ShapeGeneric, TransposesOfLongAxesCopyEveryElement) {
  std::mt19937 rng(44);
  const int64_t channels = 300;
  ModelBuilder b;
  b.input("x", 1, {1, channels, -1}).output_any("y", 1);
  b.node("Transpose", {"x"}, {"y"}, [](auto& n) { ModelBuilder::set_ints(n, "perm", {0, 2, 1}); });
  const std::string bytes = b.bytes();
  Session s = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
  for (const int64_t len : {7, 3000, 1024, 2049}) {
    SCOPED_TRACE("length " + std::to_string(len));
    const std::vector<float> x = uniform_values(rng, static_cast<size_t>(channels * len));
    Tensor t = Tensor::empty(DType::Float, {1, channels, len});
    std::copy(x.begin(), x.end(), t.data<float>());
    const Tensor y = s.run({{"x", t}})[0].tensor();
    ASSERT_EQ(y.shape(), (Shape{1, len, channels}));
    for (int64_t i = 0; i < len; ++i)
      for (int64_t c = 0; c < channels; ++c)
        ASSERT_EQ(y.data<float>()[i * channels + c], x[c * len + i])
            << "position " << i << ", channel " << c;
  }
}
}  // namespace
}  // namespace volt
