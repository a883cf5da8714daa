// Pools over channels stored last or in blocks run volt's loops (operators/cpu/pool.cpp), each
// checked against the unoptimized graph (channels-first, oneDNN's primitive):
// - GlobalAveragePool's banded loop: narrow pixels (runs of several pixels at once), wide ones
//   (64 channels at a time, the last 64 overlapping), images split into bands summed in
//   parallel, and a batch.
// - MaxPool's and AveragePool's loop: 8, 16 or 32 channels at a time (the last chunk overlapping
//   where the pixel is not a multiple), eight pixels at a time where the window is whole and one
//   at a time at the edges, over strides, dilations, asymmetric pads and ceil_mode; max pools
//   moving one column at a time as columns' maxima, then rows'.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model_builder.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

// x -> depthwise 3x3 Conv -> its square (which keeps the region channels-last: blocks take only
// convolutions and pools) -> `pool`, or with `dense` x -> a 1x1 Conv of all channels -> `pool`
// (stored in blocks of 16, or 8 on AVX2, where the channels are whole blocks).
std::string conv_then_pool(int64_t channels, bool dense, std::mt19937& rng,
                           const std::string& pool = "GlobalAveragePool",
                           const std::function<void(onnx::NodeProto&)>& pool_attrs = {}) {
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  const int64_t per = dense ? channels : 1, k = dense ? 1 : 3;
  std::vector<float> w(static_cast<size_t>(channels * per * k * k));
  for (auto& e : w) e = u(rng);
  ModelBuilder b;
  b.input("x", 1, {-1, channels, -1, -1}).output_any("y", 1);
  b.initializer("W", {channels, per, k, k}, w);
  b.node("Conv", {"x", "W"}, {"c"}, [&](auto& n) {
    if (!dense) {
      ModelBuilder::set_int(n, "group", channels);
      ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
    }
  });
  if (!dense) b.node("Mul", {"c", "c"}, {"s"});
  b.node(pool, {dense ? "c" : "s"}, {"y"}, pool_attrs);
  return b.bytes();
}

TEST(GlobalPool, AverageOverStoredChannelsMatchesTheUnoptimizedGraph) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  struct Case {
    int64_t channels, batch, height, width;
    bool dense;
  };
  for (const Case c :
       {Case{16, 1, 56, 56, false}, Case{24, 3, 17, 9, false}, Case{32, 1, 112, 112, false},
        Case{72, 2, 14, 14, false}, Case{240, 1, 28, 28, false}, Case{1152, 2, 7, 7, false},
        Case{48, 2, 20, 20, true}, Case{64, 1, 1, 1, false}}) {
    const std::string bytes = conv_then_pool(c.channels, c.dense, rng);
    Tensor x = Tensor::empty(DType::Float, {c.batch, c.channels, c.height, c.width});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
    Session plain = Session::from_bytes(bytes.data(), bytes.size(), {.optimization_level = 0});
    Session opt = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
    const Tensor want = plain.run({{"x", x}})[0].tensor();
    const Tensor got = opt.run({{"x", x}})[0].tensor();
    ASSERT_EQ(got.shape(), (Shape{c.batch, c.channels, 1, 1}));
    ASSERT_EQ(got.shape(), want.shape());
    // Means of up to 12544 values of about 0.3 summed in another order: float rounding only.
    for (int64_t i = 0; i < got.numel(); ++i)
      ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5f)
          << c.channels << " channels, " << c.height << "x" << c.width << ", at " << i;
  }
}

TEST(WindowPool, MaxAndAverageOverStoredChannelsMatchTheUnoptimizedGraph) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  struct Window {
    std::vector<int64_t> kernel, strides, dilations, pads;
    int64_t ceil_mode;
  };
  const std::vector<Window> windows = {
      {{3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 0},  // GoogLeNet's inception branch
      {{3, 3}, {2, 2}, {1, 1}, {0, 0, 0, 0}, 1},  // its stem, ceil_mode
      {{2, 3}, {2, 1}, {2, 1}, {1, 0, 0, 2}, 0},  // dilated, asymmetric pads
      {{5, 5}, {2, 2}, {1, 1}, {2, 2, 2, 2}, 1},  // wider than a short row's interior
      {{1, 1}, {2, 2}, {1, 1}, {0, 0, 0, 0}, 0},
      // Stride 1 across a window of 7 x 7 or more, a max pool as columns then rows
      // (separable_max): a detector's pyramid pools, and one taller than strided, dilated
      // across, padded unevenly, ceil_mode.
      {{7, 7}, {1, 1}, {1, 1}, {3, 3, 3, 3}, 0},
      {{13, 13}, {1, 1}, {1, 1}, {6, 6, 6, 6}, 0},
      {{8, 7}, {2, 1}, {1, 2}, {0, 3, 4, 6}, 1}};
  struct Case {
    int64_t channels, height, width;
    bool dense;
  };
  // Channels-last pixels of 5, 13 (8 at a time, overlapping), 24 and 40 (16 and 32 at a time,
  // overlapping), 200; blocks of 8 or 16.
  for (const Case c : {Case{5, 10, 21, false}, Case{13, 9, 23, false}, Case{24, 12, 30, false},
                       Case{40, 7, 5, false}, Case{200, 6, 17, false}, Case{32, 11, 37, true},
                       Case{64, 8, 19, true}})
    for (const Window& win : windows)
      for (const int average : {0, 1, 2}) {  // MaxPool, AveragePool, counting padding
        // (AveragePool has dilations from opset 19 only.)
        if (average && win.dilations != std::vector<int64_t>{1, 1}) continue;
        const std::string op = average ? "AveragePool" : "MaxPool";
        const std::string bytes = conv_then_pool(c.channels, c.dense, rng, op, [&](auto& n) {
          ModelBuilder::set_ints(n, "kernel_shape", win.kernel);
          ModelBuilder::set_ints(n, "strides", win.strides);
          if (!average) ModelBuilder::set_ints(n, "dilations", win.dilations);
          ModelBuilder::set_ints(n, "pads", win.pads);
          ModelBuilder::set_int(n, "ceil_mode", win.ceil_mode);
          if (average) ModelBuilder::set_int(n, "count_include_pad", average - 1);
        });
        Session plain = Session::from_bytes(bytes.data(), bytes.size(), {.optimization_level = 0});
        Session opt = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
        // The second width makes `opt` plan for several shapes, where the loop takes any stored
        // channels (5 a pixel: one channel at a time).
        for (const int64_t width : {c.width, c.width + 3}) {
          Tensor x = Tensor::empty(DType::Float, {2, c.channels, c.height, width});
          for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
          const Tensor want = plain.run({{"x", x}})[0].tensor();
          const Tensor got = opt.run({{"x", x}})[0].tensor();
          ASSERT_EQ(got.shape(), want.shape());
          // Maxima or means of up to 25 of the same convolution outputs: the convolution's
          // rounding and the sum's order differ.
          for (int64_t i = 0; i < got.numel(); ++i)
            ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5f)
                << op << (average == 2 ? " counting padding, " : ", ") << c.channels
                << " channels, " << c.height << "x" << width << ", kernel " << win.kernel[0] << "x"
                << win.kernel[1] << ", at " << i;
        }
      }
}

}  // namespace
}  // namespace volt
