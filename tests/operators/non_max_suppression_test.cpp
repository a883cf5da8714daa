// NonMaxSuppression's grid-filed selection against the exhaustive greedy loop written here in
// its plainest form: every candidate, by score then index, tested against every kept box. The
// cases make the grid's edge paths run: boxes in clusters that suppress each other, classes
// shifted apart as torchvision's batched NMS does, boxes spanning many cells, zero-sized and
// non-finite boxes, center-point format, score thresholds, output limits, several batches and
// classes. Both sides compute IoU in float the same way, so the indices must be equal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "model_builder.hpp"
#include "test_options.hpp"

namespace volt {
namespace {

using testing::ModelBuilder;

struct NmsCase {
  int64_t batches = 1, classes = 1, boxes = 0;
  bool center = false;
  int64_t max_out = 1 << 30;
  float iou = 0.5f;
  bool has_score_threshold = false;
  float score_threshold = 0;
};

std::vector<int64_t> run_nms(const NmsCase& c, const std::vector<float>& boxes,
                             const std::vector<float>& scores) {
  ModelBuilder b(11);
  b.input("boxes", 1, {c.batches, c.boxes, 4})
      .input("scores", 1, {c.batches, c.classes, c.boxes})
      .output_any("selected", 7);
  b.initializer_i64("max_out", {1}, {c.max_out});
  b.initializer("iou", {1}, {c.iou});
  std::vector<std::string> ins = {"boxes", "scores", "max_out", "iou"};
  if (c.has_score_threshold) {
    b.initializer("score_threshold", {1}, {c.score_threshold});
    ins.push_back("score_threshold");
  }
  b.node("NonMaxSuppression", ins, {"selected"},
         [&](onnx::NodeProto& n) { ModelBuilder::set_int(n, "center_point_box", c.center); });
  const std::string bytes = b.bytes();
  Session s =
      Session::from_bytes(bytes.data(), bytes.size(), testing::test_options({.threads = 2}));
  const Tensor y = s.run({{"boxes", Tensor::from(boxes, {c.batches, c.boxes, 4})},
                          {"scores", Tensor::from(scores, {c.batches, c.classes, c.boxes})}})[0]
                       .tensor();
  return std::vector<int64_t>(y.data<int64_t>(), y.data<int64_t>() + y.numel());
}

// The exhaustive loop, in the spec's terms.
std::vector<int64_t> exhaustive(const NmsCase& c, const std::vector<float>& boxes,
                                const std::vector<float>& scores) {
  std::vector<int64_t> out;
  for (int64_t b = 0; b < c.batches; ++b) {
    auto corner = [&](int64_t i, int k) {
      const float* p = boxes.data() + (b * c.boxes + i) * 4;
      if (c.center) {
        const float half[4] = {-p[3] / 2, -p[2] / 2, p[3] / 2, p[2] / 2};
        return (k % 2 == 0 ? p[1] : p[0]) + half[k];
      }
      return k < 2 ? std::min(p[k], p[k + 2]) : std::max(p[k - 2], p[k]);
    };
    auto iou_over = [&](int64_t i, int64_t j) {
      const float ih = std::min(corner(i, 2), corner(j, 2)) - std::max(corner(i, 0), corner(j, 0));
      const float iw = std::min(corner(i, 3), corner(j, 3)) - std::max(corner(i, 1), corner(j, 1));
      if (!(ih > 0 && iw > 0)) return false;
      const float ai = (corner(i, 2) - corner(i, 0)) * (corner(i, 3) - corner(i, 1));
      const float aj = (corner(j, 2) - corner(j, 0)) * (corner(j, 3) - corner(j, 1));
      const float inter = ih * iw, uni = ai + aj - inter;
      return uni > 0 && inter / uni > c.iou;
    };
    for (int64_t k = 0; k < c.classes; ++k) {
      const float* s = scores.data() + (b * c.classes + k) * c.boxes;
      std::vector<int64_t> order;
      for (int64_t i = 0; i < c.boxes; ++i)
        if (!c.has_score_threshold || s[i] > c.score_threshold) order.push_back(i);
      std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
        if (std::isnan(s[x]) || std::isnan(s[y])) return !std::isnan(s[x]) && std::isnan(s[y]);
        return s[x] > s[y];
      });
      std::vector<int64_t> kept;
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) >= c.max_out) break;
        if (std::none_of(kept.begin(), kept.end(), [&](int64_t j) { return iou_over(i, j); }))
          kept.push_back(i);
      }
      for (int64_t i : kept) out.insert(out.end(), {b, k, i});
    }
  }
  return out;
}

// Boxes in clusters of seven (so that many overlap), some large enough to span more cells than
// the grid files (cells are about a median box wide), a few spanning most of `extent`, a few
// with no area; corners in either order.
std::vector<float> clustered_boxes(int64_t n, std::mt19937& rng, float extent) {
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> v;
  float cy = 0, cx = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 7 == 0) cy = u(rng) * extent, cx = u(rng) * extent;
    float h = 2 + u(rng) * 30, w = 2 + u(rng) * 30;
    if (i % 13 == 4) h = 120 + u(rng) * 120, w = 120 + u(rng) * 120;  // spans many cells
    if (i % 97 == 5) h = w = extent * 0.8f;
    if (i % 89 == 3) h = 0;  // no area
    const float y = cy + u(rng) * 8, x = cx + u(rng) * 8;
    if (i % 2)
      v.insert(v.end(), {y, x, y + h, x + w});
    else
      v.insert(v.end(), {y + h, x + w, y, x});  // flipped corners
  }
  return v;
}

std::vector<float> random_scores(int64_t n, std::mt19937& rng, bool ties) {
  std::uniform_real_distribution<float> u(0, 1);
  std::vector<float> s(static_cast<size_t>(n));
  for (float& x : s) x = ties ? std::round(u(rng) * 8) / 8 : u(rng);
  return s;
}

TEST(NonMaxSuppression, MatchesTheExhaustiveLoop) {
  std::mt19937 rng(7);
  for (float iou : {0.0f, 0.3f, 0.5f, 0.9f, 1.0f})
    for (bool ties : {false, true}) {
      NmsCase c;
      c.boxes = 1500;
      c.iou = iou;
      const auto boxes = clustered_boxes(c.boxes, rng, 400);
      const auto scores = random_scores(c.boxes, rng, ties);
      EXPECT_EQ(run_nms(c, boxes, scores), exhaustive(c, boxes, scores))
          << "iou " << iou << (ties ? ", tied scores" : "");
    }
}

TEST(NonMaxSuppression, ClassesShiftedApartAsBatchedNmsDoes) {
  std::mt19937 rng(11);
  NmsCase c;
  c.boxes = 3000;
  std::vector<float> boxes = clustered_boxes(c.boxes, rng, 300);
  for (int64_t i = 0; i < c.boxes; ++i)
    for (int k = 0; k < 4; ++k) boxes[static_cast<size_t>(i * 4 + k)] += 400.0f * (i % 30);
  const auto scores = random_scores(c.boxes, rng, false);
  const auto expected = exhaustive(c, boxes, scores);
  EXPECT_GT(expected.size(), 3u * 300) << "the case should keep many boxes";
  EXPECT_EQ(run_nms(c, boxes, scores), expected);
}

TEST(NonMaxSuppression, BatchesClassesThresholdsAndLimits) {
  std::mt19937 rng(3);
  NmsCase c;
  c.batches = 2, c.classes = 3, c.boxes = 700;
  c.has_score_threshold = true, c.score_threshold = 0.25f;
  c.max_out = 40;
  std::vector<float> boxes;
  for (int64_t b = 0; b < c.batches; ++b) {
    const auto one = clustered_boxes(c.boxes, rng, 200);
    boxes.insert(boxes.end(), one.begin(), one.end());
  }
  const auto scores = random_scores(c.batches * c.classes * c.boxes, rng, false);
  EXPECT_EQ(run_nms(c, boxes, scores), exhaustive(c, boxes, scores));
  c.center = true;
  for (size_t i = 0; i < boxes.size(); i += 4)  // [x_center, y_center, width, height] >= 0
    boxes[i + 2] = std::abs(boxes[i + 2] - boxes[i]),
              boxes[i + 3] = std::abs(boxes[i + 3] - boxes[i + 1]);
  EXPECT_EQ(run_nms(c, boxes, scores), exhaustive(c, boxes, scores));
  c.max_out = 0;
  EXPECT_TRUE(run_nms(c, boxes, scores).empty());
}

TEST(NonMaxSuppression, NonFiniteBoxesAndScores) {
  std::mt19937 rng(5);
  NmsCase c;
  c.boxes = 400;
  auto boxes = clustered_boxes(c.boxes, rng, 100);
  auto scores = random_scores(c.boxes, rng, false);
  const float inf = std::numeric_limits<float>::infinity(),
              nan = std::numeric_limits<float>::quiet_NaN();
  boxes[4 * 10 + 2] = inf;
  boxes[4 * 20 + 1] = -inf;
  boxes[4 * 30 + 0] = nan;
  boxes[4 * 31 + 3] = nan;
  scores[40] = nan;
  scores[41] = inf;
  EXPECT_EQ(run_nms(c, boxes, scores), exhaustive(c, boxes, scores));
}

TEST(NonMaxSuppression, RefusesThresholdsOutsideZeroToOne) {
  NmsCase c;
  c.boxes = 2;
  c.iou = -0.5f;
  try {
    run_nms(c, {0, 0, 1, 1, 0, 0, 1, 1}, {0.5f, 0.4f});
    FAIL() << "a negative IoU threshold ran";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("iou_threshold"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace volt
