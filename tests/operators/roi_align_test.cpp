// RoiAlign (each RoI's sample taps computed once and shared by its channels, RoIs in parallel)
// against the definition written plainly here: every bin's samples, each a bilinear read
// clamped at the border and zero outside, averaged or maxed. RoIs of several sizes (sampling
// ratio 0 takes ceil(size / bins) samples), some reaching outside the image, two images.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model_builder.hpp"
#include "test_options.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

double sample(const std::vector<float>& plane, int64_t h, int64_t w, double y, double x) {
  if (y < -1.0 || y > double(h) || x < -1.0 || x > double(w)) return 0;
  y = std::max(y, 0.0), x = std::max(x, 0.0);
  int64_t y0 = int64_t(y), x0 = int64_t(x);
  int64_t y1 = y0 + 1, x1 = x0 + 1;
  if (y0 >= h - 1) y0 = y1 = h - 1, y = double(y0);
  if (x0 >= w - 1) x0 = x1 = w - 1, x = double(x0);
  const double ly = y - double(y0), lx = x - double(x0);
  auto at = [&](int64_t r, int64_t c) { return double(plane[size_t(r * w + c)]); };
  return (1 - ly) * (1 - lx) * at(y0, x0) + (1 - ly) * lx * at(y0, x1) +
         ly * (1 - lx) * at(y1, x0) + ly * lx * at(y1, x1);
}

TEST(RoiAlign, MatchesTheDefinition) {
  std::mt19937 rng(59);
  std::uniform_real_distribution<float> u(-1, 1), pos(-4, 30);
  const int64_t n = 2, c = 3, h = 20, w = 24, rois = 9, oh = 3, ow = 4;
  std::vector<float> x(size_t(n * c * h * w)), boxes;
  for (float& v : x) v = u(rng);
  std::vector<int64_t> batch;
  for (int64_t r = 0; r < rois; ++r) {
    const float x1 = pos(rng), y1 = pos(rng);
    boxes.insert(boxes.end(), {x1, y1, x1 + 1 + std::abs(pos(rng)), y1 + 1 + std::abs(pos(rng))});
    batch.push_back(r % 2);
  }
  for (const char* mode : {"avg", "max"})
    for (int64_t ratio : {0, 2}) {
      ModelBuilder b(16);
      b.input("x", 1, {n, c, h, w}).input("rois", 1, {rois, 4}).input("batch", 7, {rois});
      b.output_any("y", 1);
      b.node("RoiAlign", {"x", "rois", "batch"}, {"y"}, [&](onnx::NodeProto& node) {
        ModelBuilder::set_string(node, "mode", mode);
        ModelBuilder::set_int(node, "output_height", oh);
        ModelBuilder::set_int(node, "output_width", ow);
        ModelBuilder::set_int(node, "sampling_ratio", ratio);
        ModelBuilder::set_float(node, "spatial_scale", 0.5f);
      });
      const std::string bytes = b.bytes();
      Session s =
          Session::from_bytes(bytes.data(), bytes.size(), testing::test_options({.threads = 2}));
      const Tensor y = s.run({{"x", Tensor::from(x, {n, c, h, w})},
                              {"rois", Tensor::from(boxes, {rois, 4})},
                              {"batch", Tensor::from(batch, {rois})}})[0]
                           .tensor();
      const bool max = std::string(mode) == "max";
      for (int64_t r = 0; r < rois; ++r) {
        const double x1 = boxes[size_t(r * 4)] * 0.5 - 0.5,
                     y1 = boxes[size_t(r * 4 + 1)] * 0.5 - 0.5;
        const double rw = boxes[size_t(r * 4 + 2)] * 0.5 - 0.5 - x1,
                     rh = boxes[size_t(r * 4 + 3)] * 0.5 - 0.5 - y1;
        const int64_t gh = ratio ? ratio : int64_t(std::ceil(rh / oh)),
                      gw = ratio ? ratio : int64_t(std::ceil(rw / ow));
        for (int64_t ch = 0; ch < c; ++ch) {
          const std::vector<float> plane(x.begin() + (batch[size_t(r)] * c + ch) * h * w,
                                         x.begin() + (batch[size_t(r)] * c + ch + 1) * h * w);
          for (int64_t by = 0; by < oh; ++by)
            for (int64_t bx = 0; bx < ow; ++bx) {
              double acc = max ? -INFINITY : 0;
              for (int64_t iy = 0; iy < gh; ++iy)
                for (int64_t ix = 0; ix < gw; ++ix) {
                  const double v = sample(plane, h, w, y1 + (by + (iy + 0.5) / gh) * rh / oh,
                                          x1 + (bx + (ix + 0.5) / gw) * rw / ow);
                  acc = max ? std::max(acc, v) : acc + v;
                }
              const double want = max ? acc : acc / double(std::max<int64_t>(gh * gw, 1));
              EXPECT_NEAR(y.data<float>()[((r * c + ch) * oh + by) * ow + bx], want, 1e-5)
                  << mode << " ratio " << ratio << " roi " << r;
            }
        }
      }
    }
}

// Hostile RoIs get an error naming the node, not a crash or an allocation of billions of taps:
// a NaN corner, an RoI of 10^9 pixels with sampling ratio 0, fewer batch indices than RoIs.
TEST(RoiAlign, RefusesRoisItCannotSample) {
  ModelBuilder b(16);
  b.input("x", 1, {1, 2, 8, 8}).input_any("rois", 1).input_any("batch", 7).output_any("y", 1);
  b.node("RoiAlign", {"x", "rois", "batch"}, {"y"}, [](onnx::NodeProto& node) {
    ModelBuilder::set_int(node, "output_height", 7);
    ModelBuilder::set_int(node, "output_width", 7);
  });
  const std::string bytes = b.bytes();
  Session s = Session::from_bytes(bytes.data(), bytes.size(), testing::test_options({}));
  const Tensor x = Tensor::from(std::vector<float>(128, 1.0f), {1, 2, 8, 8});
  struct Bad {
    std::vector<float> rois;
    std::vector<int64_t> batch;
    const char* says;
  };
  for (const Bad& bad : std::vector<Bad>{{{0, 0, NAN, 4}, {0}, "finite"},
                                         {{0, 0, 1e9f, 1e9f}, {0}, "2^24"},
                                         {{0, 0, 4, 4, 1, 1, 5, 5}, {0}, "batch_indices"}}) {
    const int64_t n = static_cast<int64_t>(bad.rois.size() / 4);
    try {
      s.run({{"x", x},
             {"rois", Tensor::from(bad.rois, {n, 4})},
             {"batch", Tensor::from(bad.batch, {static_cast<int64_t>(bad.batch.size())})}});
      ADD_FAILURE() << "ran: " << bad.says;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find(bad.says), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace volt
