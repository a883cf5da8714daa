// Resize over channels stored last or in blocks (operators/cpu/resize_stored_channels.cpp): each
// band of output rows resizes the input rows it reads along the width, then blends them. Checked
// against the unoptimized graph (channels-first, the plane kernel) for pixels of fewer than 8
// channels, of 12 (8 at a time, the last chunk overlapping) and 40, blocks of 8 or 16, and every
// interpolation: nearest (a gather), linear up and down, cubic with exclude_outside (taps of
// unequal count, padded), sizes that do not divide.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model_builder.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

struct ResizeCase {
  std::string mode, transform;
  std::vector<float> scales;  // or
  std::vector<int64_t> sizes;
  int64_t exclude_outside = 0;
};

// x -> a depthwise 3x3 Conv -> its square (which keeps the region channels-last) -> Resize, or
// with `dense` x -> a 1x1 Conv of all channels -> Resize (the region in blocks of 16, or 8 on
// AVX2, where the channels are whole blocks).
std::string conv_then_resize(int64_t channels, bool dense, const ResizeCase& r, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  const int64_t per = dense ? channels : 1, k = dense ? 1 : 3;
  std::vector<float> w(static_cast<size_t>(channels * per * k * k));
  for (auto& e : w) e = u(rng);
  ModelBuilder b;
  b.input("x", 1, {-1, channels, -1, -1}).output_any("y", 1);
  b.initializer("W", {channels, per, k, k}, w).initializer("roi", {0}, {});
  if (r.sizes.empty()) {
    b.initializer("scales", {4}, r.scales);
  } else {
    b.initializer("scales", {0}, {});
    b.initializer_i64("sizes", {4}, r.sizes);
  }
  b.node("Conv", {"x", "W"}, {"c"}, [&](auto& n) {
    if (!dense) {
      ModelBuilder::set_int(n, "group", channels);
      ModelBuilder::set_ints(n, "pads", {1, 1, 1, 1});
    }
  });
  if (!dense) b.node("Mul", {"c", "c"}, {"s"});
  std::vector<std::string> inputs = {dense ? "c" : "s", "roi", "scales"};
  if (!r.sizes.empty()) inputs.push_back("sizes");
  b.node("Resize", inputs, {"y"}, [&](auto& n) {
    ModelBuilder::set_string(n, "mode", r.mode);
    ModelBuilder::set_string(n, "coordinate_transformation_mode", r.transform);
    ModelBuilder::set_string(n, "nearest_mode", "floor");
    ModelBuilder::set_int(n, "exclude_outside", r.exclude_outside);
  });
  return b.bytes();
}

TEST(StoredChannelsResize, MatchesTheUnoptimizedGraph) {
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  struct Case {
    int64_t channels;
    bool dense;
  };
  const int64_t batch = 2, height = 9, width = 13;
  const std::vector<ResizeCase> resizes = {
      {"nearest", "asymmetric", {1, 1, 2, 2}, {}},
      {"nearest", "half_pixel", {}, {batch, 0, 20, 7}},
      {"linear", "half_pixel", {1, 1, 2, 2}, {}},
      {"linear", "align_corners", {}, {batch, 0, 17, 30}},
      {"linear", "pytorch_half_pixel", {1, 1, 0.6f, 0.5f}, {}},
      {"cubic", "half_pixel", {1, 1, 1.5f, 0.7f}, {}, 1},
  };
  for (const Case c :
       {Case{3, false}, Case{12, false}, Case{40, false}, Case{16, true}, Case{48, true}})
    for (ResizeCase r : resizes) {
      if (!r.sizes.empty()) r.sizes[1] = c.channels;
      const std::string bytes = conv_then_resize(c.channels, c.dense, r, rng);
      Session plain = Session::from_bytes(bytes.data(), bytes.size(), {.optimization_level = 0});
      Session opt = Session::from_bytes(bytes.data(), bytes.size(), {.threads = 2});
      Tensor x = Tensor::empty(DType::Float, {batch, c.channels, height, width});
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
      const Tensor want = plain.run({{"x", x}})[0].tensor();
      const Tensor got = opt.run({{"x", x}})[0].tensor();
      ASSERT_EQ(got.shape(), want.shape());
      // Sums of up to 16 taps of the same convolution outputs (of order 1) with weights summing
      // to 1, in another order: float rounding only.
      for (int64_t i = 0; i < got.numel(); ++i)
        ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5f)
            << r.mode << " " << r.transform << ", " << c.channels
            << (c.dense ? " channels in blocks" : " channels last") << ", at " << i;
    }
}

}  // namespace
}  // namespace volt
