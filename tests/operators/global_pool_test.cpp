// GlobalAveragePool over channels stored last or in blocks runs volt's banded loop
// (operators/cpu/pool.cpp): narrow pixels (runs of several pixels at once), wide ones (64
// channels at a time, the last 64 overlapping), images split into bands summed in parallel, and
// a batch. Each must give what the unoptimized graph (channels-first, oneDNN) gives.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model_builder.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

// x -> depthwise 3x3 Conv (which keeps the region channels-last) -> GlobalAveragePool, or with
// `dense` a 1x1 Conv of all channels (which stores them in blocks of 16).
std::string conv_then_global_pool(int64_t channels, bool dense, std::mt19937& rng) {
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
  b.node("GlobalAveragePool", {"c"}, {"y"});
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
    const std::string bytes = conv_then_global_pool(c.channels, c.dense, rng);
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

}  // namespace
}  // namespace volt
