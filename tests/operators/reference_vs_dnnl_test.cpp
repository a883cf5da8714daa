// Every oneDNN-backed kernel against the plain reference loop (float64) on awkward shapes:
// odd channel counts, batch 1 and 3, odd spatial sizes, broadcasting in every position.
// float32 against float64: 1e-4 relative covers fp32 rounding of sums of up to a few
// thousand terms of order 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

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
      // 1-D, run as 2-D of unit height: Conformer's depthwise 31 taps, wav2vec2's strided
      // layers (on blocks of 16 channels with AVX-512), grouped and dilated, one channel in
      {{1, 24, 50}, {24, 1, 31}, 24, {1}, {15, 15}, {1}, ""},
      {{2, 32, 41}, {48, 32, 3}, 1, {2}, {1, 0}, {1}, ""},
      {{1, 16, 30}, {32, 16, 2}, 1, {2}, {}, {1}, ""},
      {{1, 12, 40}, {12, 3, 3}, 4, {1}, {2, 2}, {2}, ""},
      {{2, 1, 83}, {32, 1, 10}, 1, {5}, {}, {1}, ""},   // a waveform's first layer, into blocks
      {{1, 16, 25}, {32, 16, 1}, 1, {1}, {}, {1}, ""},  // pointwise, on blocks
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

// Dilated convolutions over maps smaller than their dilation (DeepLab's ASPP: 3x3 dilated by
// 12-36 over 14x14) run without the taps that read padding only, with constant weights read
// through a strided view: against a direct float64 loop, for a centre-only window, a window
// trimmed at both ends, one axis of a strided grouped convolution, and pads too uneven to move.
TEST(ReferenceVsDnnl, ConvWithoutTapsThatReadPaddingOnly) {
  std::mt19937 rng(17);
  struct Case {
    Shape x, w;
    int64_t group;
    std::vector<int64_t> strides, pads, dilations;
  };
  const std::vector<Case> cases = {
      {{1, 8, 6, 7}, {4, 8, 3, 3}, 1, {1, 1}, {7, 7, 7, 7}, {7, 7}},
      {{2, 5, 6, 6}, {3, 5, 5, 5}, 1, {1, 1}, {8, 8, 8, 8}, {4, 4}},
      {{2, 6, 5, 9}, {6, 2, 3, 3}, 3, {2, 1}, {6, 2, 6, 2}, {6, 2}},
      {{1, 4, 5, 5}, {2, 4, 3, 3}, 1, {1, 1}, {9, 0, 1, 8}, {5, 4}},
  };
  for (const auto& c : cases) {
    const Tensor x = random_double(c.x, rng), w = random_double(c.w, rng),
                 b = random_double({c.w[0]}, rng);
    std::vector<float> wf(static_cast<size_t>(w.numel())), bf(static_cast<size_t>(b.numel()));
    for (size_t i = 0; i < wf.size(); ++i) wf[i] = static_cast<float>(w.data<double>()[i]);
    for (size_t i = 0; i < bf.size(); ++i) bf[i] = static_cast<float>(b.data<double>()[i]);
    ModelBuilder mb;
    mb.input("x", 1, c.x)
        .output("y", 1, {})
        .initializer("W", c.w, wf)
        .initializer("B", {c.w[0]}, bf);
    mb.node("Conv", {"x", "W", "B"}, {"y"}, [&](onnx::NodeProto& n) {
      ModelBuilder::set_int(n, "group", c.group);
      ModelBuilder::set_ints(n, "strides", c.strides);
      ModelBuilder::set_ints(n, "pads", c.pads);
      ModelBuilder::set_ints(n, "dilations", c.dilations);
    });
    const std::string bytes = mb.bytes();
    Session s =
        Session::from_bytes(bytes.data(), bytes.size(), {.threads = testing::test_threads(2)});
    Tensor xf = Tensor::empty(DType::Float, c.x);
    for (int64_t i = 0; i < x.numel(); ++i)
      xf.data<float>()[i] = static_cast<float>(x.data<double>()[i]);
    RunProfile profile;
    const Tensor y = s.run({{"x", xf}}, {}, {.profile = &profile})[0].tensor();
    for (const ProfileEvent& e : profile.events) EXPECT_EQ(e.reference, "") << shape_str(c.x);
    // The direct loop, in float64.
    const int64_t n = c.x[0], ci = c.x[1], h = c.x[2], wd = c.x[3], m = c.w[0], kh = c.w[2],
                  kw = c.w[3], cg = ci / c.group, mg = m / c.group;
    const int64_t oh =
        (h + c.pads[0] + c.pads[2] - (kh - 1) * c.dilations[0] - 1) / c.strides[0] + 1;
    const int64_t ow =
        (wd + c.pads[1] + c.pads[3] - (kw - 1) * c.dilations[1] - 1) / c.strides[1] + 1;
    ASSERT_EQ(y.shape(), (Shape{n, m, oh, ow}));
    const double* xd = x.data<double>();
    const double* wdd = w.data<double>();
    for (int64_t b0 = 0; b0 < n; ++b0)
      for (int64_t o = 0; o < m; ++o)
        for (int64_t i = 0; i < oh; ++i)
          for (int64_t j = 0; j < ow; ++j) {
            double acc = b.data<double>()[o];
            const int64_t g = o / mg;
            for (int64_t cc = 0; cc < cg; ++cc)
              for (int64_t u = 0; u < kh; ++u)
                for (int64_t v = 0; v < kw; ++v) {
                  const int64_t r = i * c.strides[0] - c.pads[0] + u * c.dilations[0];
                  const int64_t q = j * c.strides[1] - c.pads[1] + v * c.dilations[1];
                  if (r < 0 || r >= h || q < 0 || q >= wd) continue;
                  acc += xd[((b0 * ci + g * cg + cc) * h + r) * wd + q] *
                         wdd[((o * cg + cc) * kh + u) * kw + v];
                }
            const double got = y.data<float>()[((b0 * m + o) * oh + i) * ow + j];
            ASSERT_NEAR(got, acc, kTol * (1 + std::abs(acc)))
                << shape_str(c.x) << " at " << i << "," << j;
          }
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
  // Channels-first global means of 1, 2 and 3 spatial axes on volt's plane loop (runs of pixels
  // around its 64-float runs and the 8192-float bands).
  for (const Shape& x : {Shape{2, 5, 3199}, Shape{1, 3, 130, 67}, Shape{2, 3, 4, 5, 6}})
    expect_same("GlobalAveragePool", {random_double(x, rng)}, {}, 13, true);
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
                               "Softplus", "HardSigmoid", "Erf", "HardSwish"})
    expect_same(op, {x}, {}, 14);
  expect_same("Mish", {x}, {}, 18);
  for (const char* approximate : {"none", "tanh"})
    expect_same(
        "Gelu", {x},
        [&](onnx::NodeProto& n) { ModelBuilder::set_string(n, "approximate", approximate); }, 20);
  const Tensor pos = random_double({3, 13, 11, 11}, rng, 0.1, 3);
  for (const std::string op : {"Log", "Sqrt", "Reciprocal"}) expect_same(op, {pos});
}

// f32 planes (the mean and variance summed in double, one per thread) against the f64 loop.
TEST(ReferenceVsDnnl, InstanceNormalization) {
  std::mt19937 rng(41);
  for (const Shape& x : {Shape{2, 5, 7, 9}, Shape{1, 3, 130, 130}, Shape{3, 4, 17}})
    expect_same("InstanceNormalization", {random_double(x, rng, -2, 5), random_double({x[1]}, rng),
                                          random_double({x[1]}, rng)});
}

// PRelu by rows: a slope per channel (constant along each plane's rows), one per element, a
// scalar, and one broadcast along the last axis.
TEST(ReferenceVsDnnl, PReluSlopes) {
  std::mt19937 rng(43);
  const Tensor x = random_double({2, 6, 50, 70}, rng, -2, 2);
  for (const Shape& slope : {Shape{6, 1, 1}, Shape{2, 6, 50, 70}, Shape{1}, Shape{70}})
    expect_same("PRelu", {x, random_double(slope, rng)});
}

// LRN's f32 loop (positions in pieces of 256, beta 0.75 by square roots) against the f64 one:
// odd and even windows, fewer channels than the window, images wider than a piece.
TEST(ReferenceVsDnnl, LrnAcrossChannels) {
  std::mt19937 rng(47);
  for (const Shape& x : {Shape{2, 7, 19, 23}, Shape{1, 3, 5, 5}, Shape{2, 16, 300}})
    for (int64_t size : {3, 4, 5})
      for (float beta : {0.75f, 0.6f})
        expect_same("LRN", {random_double(x, rng, -3, 3)}, [&](onnx::NodeProto& n) {
          ModelBuilder::set_int(n, "size", size);
          ModelBuilder::set_float(n, "beta", beta);
          ModelBuilder::set_float(n, "alpha", 0.01f);
        });
}

// f32 Max and Min over one block of axes (contiguous runs in lanes, or rows of columns) and
// ArgMax/ArgMin by rows of columns, against the general loops in f64, with NaNs (skipped by
// Max and Min, never better for the Args) and ties (first or last index).
TEST(ReferenceVsDnnl, ExtremesAndTheirIndices) {
  std::mt19937 rng(53);
  Tensor x = random_double({3, 37, 300}, rng, -4, 4);
  for (int64_t i = 0; i < x.numel(); i += 97) x.data<double>()[i] = NAN;
  for (int64_t i = 5; i < x.numel(); i += 13) x.data<double>()[i] = 2.0;  // ties
  for (const char* op : {"ReduceMax", "ReduceMin"})
    for (const std::vector<int64_t>& axes :
         std::vector<std::vector<int64_t>>{{2}, {1}, {1, 2}, {0}})
      expect_same(op, {x}, [&](onnx::NodeProto& n) { ModelBuilder::set_ints(n, "axes", axes); });
  // The indices of the f32 run against the f64 one (x's values are the same in both).
  auto arg = [&](const char* op, int64_t axis, int64_t last, DType dtype) {
    ModelBuilder b(13);
    b.input_any("x", dtype == DType::Float ? 1 : 11).output_any("y", 7);
    b.node(op, {"x"}, {"y"}, [&](onnx::NodeProto& n) {
      ModelBuilder::set_int(n, "axis", axis);
      ModelBuilder::set_int(n, "select_last_index", last);
    });
    const std::string bytes = b.bytes();
    Session s = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
    const Tensor y = s.run({{"x", testing::cast_to(x, dtype)}})[0].tensor();
    return std::vector<int64_t>(y.data<int64_t>(), y.data<int64_t>() + y.numel());
  };
  // The definition, index by index: the first (or last) position of the best value, a NaN
  // never better than what came before it.
  auto expected = [&](bool max, int64_t axis, bool last) {
    const Shape& sh = x.shape();
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= sh[static_cast<size_t>(d)];
    for (size_t d = static_cast<size_t>(axis) + 1; d < sh.size(); ++d) inner *= sh[d];
    const int64_t n = sh[static_cast<size_t>(axis)];
    std::vector<int64_t> out;
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        auto at = [&](int64_t j) { return x.data<double>()[(o * n + j) * inner + i]; };
        int64_t best = 0;
        for (int64_t j = 1; j < n; ++j) {
          const double v = at(j), b = at(best);
          if (max ? (last ? v >= b : v > b) : (last ? v <= b : v < b)) best = j;
        }
        out.push_back(best);
      }
    return out;
  };
  for (const char* op : {"ArgMax", "ArgMin"})
    for (int64_t axis : {0, 1, 2})
      for (int64_t last : {0, 1})
        EXPECT_EQ(arg(op, axis, last, DType::Float),
                  expected(std::string(op) == "ArgMax", axis, last != 0))
            << op << " axis " << axis << " last " << last;
}

// Channels-first pools that oneDNN serves only with its scalar kernel (1-D windows, 2-D ones
// of one row, 3-D) run volt's plane loop in f32: edges and interior, pads, dilations, ceil
// mode, averages with and without the padding, NaNs (a max starts from its first live tap).
TEST(ReferenceVsDnnl, ChannelsFirstPoolsOnThePlaneLoop) {
  std::mt19937 rng(71);
  struct Case {
    Shape x;
    std::vector<int64_t> kernel, strides, pads, dilations;
    int64_t ceil = 0;
  };
  Tensor x1 = random_double({2, 3, 37}, rng);
  x1.data<double>()[5] = x1.data<double>()[40] = NAN;
  for (const Case& c :
       std::vector<Case>{{{2, 3, 37}, {3}, {2}, {1, 1}, {1}},
                         {{2, 3, 37}, {4}, {3}, {2, 1}, {2}, 1},
                         {{2, 3, 37}, {5}, {1}, {0, 0}, {1}},
                         {{1, 4, 1, 50}, {1, 3}, {1, 2}, {0, 1, 0, 1}, {1, 1}},
                         {{1, 2, 6, 9, 11}, {2, 3, 3}, {2, 2, 1}, {1, 1, 1, 0, 1, 1}, {1, 1, 2}}}) {
    const Tensor x = c.x.size() == 3 ? x1 : random_double(c.x, rng);
    for (const char* op : {"MaxPool", "AveragePool"})
      for (int64_t include_pad : {0, 1}) {
        if (std::string(op) == "MaxPool" && include_pad) continue;
        const bool dilated =
            std::any_of(c.dilations.begin(), c.dilations.end(), [](int64_t d) { return d != 1; });
        if (std::string(op) == "AveragePool" && (c.ceil || dilated))
          continue;  // (opset 13's AveragePool has no dilations; ceil with padding counted is the
                     // reference's)
        expect_same(op, {x}, [&](onnx::NodeProto& n) {
          ModelBuilder::set_ints(n, "kernel_shape", c.kernel);
          ModelBuilder::set_ints(n, "strides", c.strides);
          ModelBuilder::set_ints(n, "pads", c.pads);
          if (std::string(op) == "MaxPool") ModelBuilder::set_ints(n, "dilations", c.dilations);
          ModelBuilder::set_int(n, "ceil_mode", c.ceil);
          if (include_pad) ModelBuilder::set_int(n, "count_include_pad", 1);
        });
      }
  }
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

// Hardmax of f32 rows on its lane loop against the float64 reference loop: random rows (opset 11
// coerces to 2-D, 13 takes the last axis), then rows with a tie (the first wins), with NaNs
// (never chosen), of -inf only and of NaN only (position 0).
TEST(ReferenceVsDnnl, HardmaxRowsWithTiesNaNsAndInfinities) {
  std::mt19937 rng(29);
  const Tensor x = random_double({3, 5, 37}, rng, -4, 4);
  for (int opset : {11, 13})
    expect_same(
        "Hardmax", {x}, [](onnx::NodeProto& n) { ModelBuilder::set_int(n, "axis", -1); }, opset);
  Tensor special = random_double({4, 19}, rng, -4, 4);
  double* v = special.data<double>();
  v[3] = v[11] = 9.0;                                    // a tie: position 3
  v[19 + 2] = std::numeric_limits<double>::quiet_NaN();  // a NaN among numbers
  for (int j = 0; j < 19; ++j) v[2 * 19 + j] = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < 19; ++j) v[3 * 19 + j] = std::numeric_limits<double>::quiet_NaN();
  const Tensor y = run_op(
      "Hardmax", {special}, DType::Float,
      [](onnx::NodeProto& n) { ModelBuilder::set_int(n, "axis", -1); }, 13);
  const Tensor want = run_op(
      "Hardmax", {special}, DType::Double,
      [](onnx::NodeProto& n) { ModelBuilder::set_int(n, "axis", -1); }, 13);
  // (run_op returns both runs' outputs as float64.)
  for (int64_t i = 0; i < 4 * 19; ++i) EXPECT_EQ(y.data<double>()[i], want.data<double>()[i]) << i;
  EXPECT_EQ(y.data<double>()[3], 1.0);
  EXPECT_EQ(y.data<double>()[2 * 19], 1.0);
  EXPECT_EQ(y.data<double>()[3 * 19], 1.0);
}

// Along an outer axis f32 runs by columns of each plane, 512 at a time: planes wider than that,
// with masked (-inf) positions.
TEST(ReferenceVsDnnl, SoftmaxAlongOuterAxesOfWidePlanes) {
  std::mt19937 rng(23);
  Tensor x = random_double({2, 7, 600}, rng, -30, 30);
  for (int64_t i = 0; i < x.numel(); i += 11) x.data<double>()[i] = -INFINITY;
  for (const std::string op : {"Softmax", "LogSoftmax"}) {
    expect_same(op, {x}, [](onnx::NodeProto& n) { ModelBuilder::set_int(n, "axis", 1); });
    expect_same(op, {random_double({3, 5, 1030}, rng, -5, 5)},
                [](onnx::NodeProto& n) { ModelBuilder::set_int(n, "axis", 0); });
  }
}

// f32 to a scalar power: products, sqrt and division for the exponents models write, pow for
// the others; against pow in float64.
TEST(ReferenceVsDnnl, PowByAScalar) {
  std::mt19937 rng(29);
  const Tensor x = random_double({3, 700}, rng, -3, 3), pos = random_double({3, 700}, rng, 0, 3);
  for (double e : {1.0, 2.0, 3.0, 4.0, -1.0, 1.7}) {
    Tensor exponent = Tensor::empty(DType::Double, {});
    exponent.data<double>()[0] = e;
    expect_same("Pow", {e == 1.7 ? pos : x, exponent});
  }
  Tensor half = Tensor::empty(DType::Double, {1});
  half.data<double>()[0] = 0.5;
  expect_same("Pow", {pos, half});
  // Quarter powers by square roots: within 1e-4 of pow on positive bases, and pow's values at
  // the edges (signed zeros, infinities, NaN, negative bases) exactly.
  const std::vector<float> edges = {-0.0f,  0.0f, INFINITY, -INFINITY, NAN,  -2.0f,
                                    1e-30f, 3.5f, 1e30f,    0.01f,     7.0f, -1e-20f};
  for (double e : {0.25, 0.75, 1.5, -0.5, -0.75}) {
    Tensor exponent = Tensor::empty(DType::Double, {});
    exponent.data<double>()[0] = e;
    expect_same("Pow", {pos, exponent});
    Tensor x = Tensor::empty(DType::Double, {static_cast<int64_t>(edges.size())});
    std::copy(edges.begin(), edges.end(), x.data<double>());
    const Tensor y = run_op("Pow", {x, exponent}, DType::Float);  // (computed in f32)
    for (size_t i = 0; i < edges.size(); ++i) {
      const float want = static_cast<float>(std::pow(static_cast<double>(edges[i]), e)),
                  got = static_cast<float>(y.data<double>()[i]);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got)) << edges[i] << " ^ " << e << " = " << got;
      } else if (std::isinf(want) || want == 0) {
        EXPECT_EQ(got, want) << edges[i] << " ^ " << e;
        EXPECT_EQ(std::signbit(got), std::signbit(want)) << edges[i] << " ^ " << e;
      } else {
        EXPECT_NEAR(got, want, 4e-7 * std::abs(want)) << edges[i] << " ^ " << e;
      }
    }
  }
}

// Two-operand Einsums that are batched products run on sgemm in f32 (each operand read in
// place, transposed, with row strides, or gathered; the product written in place, with row
// strides, or permuted into the output; M or N labels iterated where they do not run as one axis);
// the f64 run takes the general loop. The last two stay on the loop in f32 too (a broadcast
// ellipsis, a label summed within one operand).
TEST(ReferenceVsDnnl, EinsumAsBatchedProducts) {
  std::mt19937 rng(37);
  struct Case {
    const char* equation;
    Shape a, b;
  };
  for (const Case& c : std::vector<Case>{{"bhqd,bhkd->bhqk", {2, 3, 5, 4}, {2, 3, 6, 4}},
                                         {"bij,bjk->bik", {3, 4, 5}, {3, 5, 6}},
                                         {"bji,bjk->bik", {3, 5, 4}, {3, 5, 6}},
                                         {"ij,jk->ki", {4, 5}, {5, 6}},
                                         {"bnd,dh->bnh", {2, 7, 5}, {5, 3}},
                                         {"ijk,jil->kl", {3, 4, 5}, {4, 3, 6}},
                                         {"...ij,...jk->...ik", {2, 3, 4, 5}, {2, 3, 5, 2}},
                                         {"i,j->ij", {4}, {5}},
                                         {"ij,ij->i", {6, 7}, {6, 7}},
                                         {"bhqk,bkhd->bqhd", {2, 3, 4, 5}, {2, 5, 3, 6}},
                                         {"...ij,jk->...ik", {1, 4, 5}, {5, 6}},
                                         {"ijk,kl->il", {3, 4, 5}, {5, 2}},
                                         // Large enough for products per expert, or per
                                         // batch row, read and written with row strides.
                                         {"btd,edf->btef", {2, 16, 32}, {4, 32, 64}},
                                         {"btef,efd->bted", {2, 16, 4, 64}, {4, 64, 32}},
                                         {"tbd,dn->btn", {64, 2, 32}, {32, 32}},
                                         {"bdq,bdk->bqk", {2, 40, 30}, {2, 40, 50}}})
    expect_same(
        "Einsum", {random_double(c.a, rng), random_double(c.b, rng)},
        [&](onnx::NodeProto& n) { ModelBuilder::set_string(n, "equation", c.equation); }, 13);
}

// f32 rows run on volt's vectorized loop (its own exp): long rows with a vector tail, rows of
// one element, large logits, and masked positions (-inf, as attention masks write them).
TEST(ReferenceVsDnnl, SoftmaxRowsLongShortMaskedAndLarge) {
  std::mt19937 rng(19);
  for (const Shape& shape : {Shape{3, 1000}, Shape{4, 17}, Shape{5, 1}}) {
    Tensor x = random_double(shape, rng, -60, 60);
    expect_same("LogSoftmax", {x});
    for (int64_t i = 0; i < x.numel(); i += 7)
      if (shape.back() > 1) x.data<double>()[i] = -std::numeric_limits<double>::infinity();
    expect_same("Softmax", {x});
  }
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
