// Every oneDNN-backed kernel against the plain reference loop (float64) on awkward shapes:
// odd channel counts, batch 1 and 3, odd spatial sizes, broadcasting in every position.
// float32 against float64: 1e-4 relative covers fp32 rounding of sums of up to a few
// thousand terms of order 1.
#include <gtest/gtest.h>

#include "operators/op_runner.hpp"

namespace volt {
namespace {

using testing::AttrFn;
using testing::max_rel_diff;
using testing::ModelBuilder;
using testing::random_double;
using testing::run_op;

constexpr double kTol = 1e-4;

// `fast`: the fp32 run must not fall back to the reference loop (a oneDNN primitive took it).
void expect_same(const std::string& op, const std::vector<Tensor>& inputs, const AttrFn& attrs = {},
                 int opset = 13, bool fast = false) {
  std::string reference;
  const Tensor f32 = run_op(op, inputs, DType::Float, attrs, opset, &reference);
  if (fast) {
    EXPECT_EQ(reference, "") << op << " " << shape_str(inputs[0].shape());
  }
  const Tensor f64 = run_op(op, inputs, DType::Double, attrs, opset);
  ASSERT_EQ(f32.shape(), f64.shape()) << op;
  EXPECT_LT(max_rel_diff(f32, f64), kTol) << op << " " << shape_str(inputs[0].shape());
}

TEST(ReferenceVsDnnl, Conv) {
  std::mt19937 rng(11);
  struct Case {
    Shape x, w;
    int64_t group;
    std::vector<int64_t> strides, pads, dilations;
    std::string auto_pad;
  };
  const std::vector<Case> cases = {
      {{1, 13, 9, 11}, {24, 13, 3, 3}, 1, {1, 1}, {1, 1, 1, 1}, {1, 1}, ""},
      {{3, 12, 10, 7}, {6, 4, 3, 2}, 3, {2, 1}, {0, 1, 2, 0}, {1, 2}, ""},
      {{2, 8, 13, 13}, {8, 1, 5, 5}, 8, {2, 2}, {}, {1, 1}, "SAME_UPPER"},
      {{1, 3, 17}, {5, 3, 4}, 1, {3}, {}, {2}, "SAME_LOWER"},
      {{1, 2, 5, 6, 7}, {4, 2, 3, 3, 3}, 1, {1, 2, 1}, {1, 1, 1, 1, 1, 1}, {1, 1, 1}, ""},
  };
  for (const auto& c : cases) {
    const Tensor x = random_double(c.x, rng), w = random_double(c.w, rng),
                 b = random_double({c.w[0]}, rng);
    AttrFn attrs = [&](onnx::NodeProto& n) {
      ModelBuilder::set_int(n, "group", c.group);
      ModelBuilder::set_ints(n, "strides", c.strides);
      ModelBuilder::set_ints(n, "dilations", c.dilations);
      if (!c.pads.empty()) ModelBuilder::set_ints(n, "pads", c.pads);
      if (!c.auto_pad.empty()) ModelBuilder::set_string(n, "auto_pad", c.auto_pad);
    };
    expect_same("Conv", {x, w, b}, attrs, 13, true);
    expect_same("Conv", {x, w}, attrs, 13, true);
  }
}

// ConvTranspose on oneDNN's deconvolution against the reference scatter loop: groups, strides,
// dilations, output_padding (which makes oneDNN's end padding negative), output_shape and
// auto_pad, 1-3 spatial axes.
TEST(ReferenceVsDnnl, ConvTranspose) {
  std::mt19937 rng(21);
  struct Case {
    Shape x, w;
    int64_t group;
    std::vector<int64_t> strides, pads, dilations, output_padding, output_shape;
    std::string auto_pad;
  };
  const std::vector<Case> cases = {
      {{1, 13, 9, 11}, {13, 5, 3, 3}, 1, {2, 2}, {1, 1, 1, 1}, {1, 1}, {1, 1}, {}, ""},
      {{3, 12, 5, 7}, {12, 2, 4, 4}, 3, {2, 2}, {1, 1, 1, 1}, {1, 1}, {}, {}, ""},
      {{2, 8, 6, 5}, {8, 1, 3, 3}, 8, {1, 2}, {0, 1, 2, 0}, {2, 1}, {0, 1}, {}, ""},
      {{1, 6, 7, 7}, {6, 4, 2, 2}, 1, {2, 2}, {}, {1, 1}, {}, {15, 14}, ""},
      {{1, 3, 17}, {3, 5, 4}, 1, {3}, {}, {2}, {}, {}, "SAME_UPPER"},
      {{1, 4, 3, 5, 4},
       {4, 3, 3, 3, 3},
       1,
       {2, 1, 2},
       {1, 1, 1, 0, 1, 1},
       {1, 1, 1},
       {1, 0, 0},
       {},
       ""},
  };
  for (const auto& c : cases) {
    const Tensor x = random_double(c.x, rng), w = random_double(c.w, rng),
                 b = random_double({c.w[1] * c.group}, rng);
    AttrFn attrs = [&](onnx::NodeProto& n) {
      ModelBuilder::set_int(n, "group", c.group);
      ModelBuilder::set_ints(n, "strides", c.strides);
      ModelBuilder::set_ints(n, "dilations", c.dilations);
      if (!c.pads.empty()) ModelBuilder::set_ints(n, "pads", c.pads);
      if (!c.output_padding.empty()) ModelBuilder::set_ints(n, "output_padding", c.output_padding);
      if (!c.output_shape.empty()) ModelBuilder::set_ints(n, "output_shape", c.output_shape);
      if (!c.auto_pad.empty()) ModelBuilder::set_string(n, "auto_pad", c.auto_pad);
    };
    expect_same("ConvTranspose", {x, w, b}, attrs, 13, true);
    expect_same("ConvTranspose", {x, w}, attrs, 13, true);
  }
}

TEST(ReferenceVsDnnl, Pooling) {
  std::mt19937 rng(12);
  for (const std::string op : {"MaxPool", "AveragePool"})
    for (int ceil : {0, 1})
      for (int include_pad : {0, 1}) {
        if (op == "MaxPool" && include_pad) continue;
        const Tensor x = random_double({3, 13, 11, 9}, rng);
        expect_same(op, {x}, [&](onnx::NodeProto& n) {
          ModelBuilder::set_ints(n, "kernel_shape", {3, 2});
          ModelBuilder::set_ints(n, "strides", {2, 2});
          ModelBuilder::set_ints(n, "pads", {1, 0, 1, 1});
          ModelBuilder::set_int(n, "ceil_mode", ceil);
          if (op == "AveragePool") ModelBuilder::set_int(n, "count_include_pad", include_pad);
        });
      }
  expect_same("GlobalAveragePool", {random_double({3, 13, 7, 5}, rng)});
  expect_same("GlobalMaxPool", {random_double({1, 24, 7, 5}, rng)});
}

TEST(ReferenceVsDnnl, MatMulWithBroadcastBatches) {
  std::mt19937 rng(13);
  const std::vector<std::pair<Shape, Shape>> cases = {{{3, 1, 17, 13}, {5, 13, 9}},
                                                      {{13}, {4, 13, 7}},
                                                      {{2, 7, 13}, {13}},
                                                      {{1, 31}, {31, 1}},
                                                      {{64, 100}, {100, 70}}};
  for (const auto& [a, b] : cases)
    expect_same("MatMul", {random_double(a, rng), random_double(b, rng)});
}

TEST(ReferenceVsDnnl, GemmTransposesAndBias) {
  std::mt19937 rng(14);
  for (int ta : {0, 1})
    for (int tb : {0, 1})
      for (const Shape& c : {Shape{7}, Shape{1, 7}, Shape{5, 7}, Shape{5, 1}, Shape{}})
        for (float alpha : {1.0f, 0.5f}) {
          const Tensor a = random_double(ta ? Shape{13, 5} : Shape{5, 13}, rng);
          const Tensor b = random_double(tb ? Shape{7, 13} : Shape{13, 7}, rng);
          expect_same("Gemm", {a, b, random_double(c, rng)}, [&](onnx::NodeProto& n) {
            ModelBuilder::set_int(n, "transA", ta);
            ModelBuilder::set_int(n, "transB", tb);
            ModelBuilder::set_float(n, "alpha", alpha);
            ModelBuilder::set_float(n, "beta", alpha == 1.0f ? 1.0f : 2.0f);
          });
        }
}

TEST(ReferenceVsDnnl, BinaryBroadcastInEveryPosition) {
  std::mt19937 rng(15);
  const Shape full{3, 13, 11, 11};  // 4719 elements: over the oneDNN threshold
  const std::vector<Shape> others = {{3, 13, 11, 11}, {1},           {11},
                                     {13, 1, 1},      {3, 1, 11, 1}, {1, 13, 1, 11}};
  for (const std::string op : {"Add", "Sub", "Mul", "Div"})
    for (const Shape& o : others) {
      const double lo = op == "Div" ? 0.5 : -1;
      expect_same(op, {random_double(full, rng), random_double(o, rng, lo, 2)});
      expect_same(op, {random_double(o, rng, lo, 2), random_double(full, rng, lo, 2)});
    }
}

TEST(ReferenceVsDnnl, EltwiseActivations) {
  std::mt19937 rng(16);
  const Tensor x = random_double({3, 13, 11, 11}, rng, -3, 3);
  for (const std::string op : {"Relu", "Sigmoid", "Tanh", "Exp", "Abs", "Elu", "LeakyRelu",
                               "Softplus", "HardSigmoid", "Erf"})
    expect_same(op, {x});
  const Tensor pos = random_double({3, 13, 11, 11}, rng, 0.1, 3);
  for (const std::string op : {"Log", "Sqrt", "Reciprocal"}) expect_same(op, {pos});
}

TEST(ReferenceVsDnnl, SoftmaxFamilyOnEveryAxis) {
  std::mt19937 rng(17);
  const Tensor x = random_double({3, 13, 5, 7}, rng, -4, 4);
  for (const std::string op : {"Softmax", "LogSoftmax"})
    for (int64_t axis : {-1, 0, 1, 2})
      for (int opset : {11, 13})
        expect_same(
            op, {x}, [&](onnx::NodeProto& n) { ModelBuilder::set_int(n, "axis", axis); }, opset);
}

TEST(ReferenceVsDnnl, BatchNormalization) {
  std::mt19937 rng(18);
  const int64_t c = 13;
  expect_same("BatchNormalization",
              {random_double({3, c, 7, 5}, rng), random_double({c}, rng), random_double({c}, rng),
               random_double({c}, rng), random_double({c}, rng, 0.5, 2)});
}

}  // namespace
}  // namespace volt

namespace volt {
namespace {

// The binary loop's fast path for an operand repeating along the trailing axes (a bias), on
// either side of a non-commutative op, against the definition.
TEST(BinaryLoop, TrailingBroadcastOnEitherSide) {
  std::mt19937 rng(31);
  const Tensor a = random_double({2, 3, 5}, rng), b = random_double({1, 3, 5}, rng),
               c = random_double({5}, rng);
  for (DType dt : {DType::Double, DType::Float}) {
    const Tensor ab = run_op("Sub", {a, b}, dt), ca = run_op("Sub", {c, a}, dt);
    for (int64_t i = 0; i < a.numel(); ++i) {
      const double x = a.data<double>()[i];
      EXPECT_NEAR(ab.data<double>()[i], x - b.data<double>()[i % 15], 1e-6);
      EXPECT_NEAR(ca.data<double>()[i], c.data<double>()[i % 5] - x, 1e-6);
    }
  }
}

}  // namespace
}  // namespace volt
