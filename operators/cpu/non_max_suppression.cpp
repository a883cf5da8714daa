// NonMaxSuppression: greedy selection by score, a candidate dropped when its IoU with a box
// already kept exceeds the threshold.
//
// Detection heads feed it tens of thousands of candidates: torchvision's batched NMS shifts
// each class's boxes to a region of their own and runs one class of 90 x 300 boxes, of which
// thousands are kept. Testing each candidate against every kept box is then 10^8 IoUs (SSDLite:
// 326 ms of a 355 ms run). With a threshold >= 0 a kept box can only suppress a candidate whose
// rectangle it overlaps with positive area (IoU > t >= 0 needs a positive intersection), so
// kept boxes are filed in a uniform grid of cells about a box wide, and a candidate is tested
// against the boxes filed in the cells it covers only. Boxes that span many cells (and boxes
// with non-finite corners) go to a list every candidate tests. The result is the one of the
// exhaustive loop: same order, same IoU arithmetic (float, as ONNX Runtime computes it; a NaN
// IoU suppresses nothing). Thresholds outside [0, 1] are refused, as ONNX Runtime does.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "operators/common/parallel.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/common/tensor_values.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

struct Corners {
  std::vector<float> y1, x1, y2, x2, area;
  explicit Corners(size_t n) : y1(n), x1(n), y2(n), x2(n), area(n) {}
};

// Boxes [n, 4] as corners y1 <= y2, x1 <= x2, with their areas. `center`: the rows are
// [x_center, y_center, width, height]; else two opposite corners in either order.
void to_corners(const float* p, int64_t n, bool center, Corners& c) {
  for (int64_t i = 0; i < n; ++i, p += 4) {
    float y1, x1, y2, x2;
    if (center) {
      y1 = p[1] - p[3] / 2, x1 = p[0] - p[2] / 2, y2 = p[1] + p[3] / 2, x2 = p[0] + p[2] / 2;
    } else {
      y1 = std::min(p[0], p[2]), x1 = std::min(p[1], p[3]), y2 = std::max(p[0], p[2]),
      x2 = std::max(p[1], p[3]);
    }
    c.y1[i] = y1, c.x1[i] = x1, c.y2[i] = y2, c.x2[i] = x2, c.area[i] = (y2 - y1) * (x2 - x1);
  }
}

// Whether boxes a and b (indices into c) overlap by more than `threshold` in IoU.
inline bool suppresses(const Corners& c, int64_t a, int64_t b, float threshold) {
  const float ih = std::min(c.y2[a], c.y2[b]) - std::max(c.y1[a], c.y1[b]);
  const float iw = std::min(c.x2[a], c.x2[b]) - std::max(c.x1[a], c.x1[b]);
  if (!(ih > 0 && iw > 0)) return false;
  const float inter = ih * iw, uni = c.area[a] + c.area[b] - inter;
  if (!(uni > 0)) return false;
  return inter / uni > threshold;
}

// Kept boxes filed by the grid cells they cover.
class KeptGrid {
 public:
  // Cells over the extent of the finite boxes among `order`, about a median box wide, at most
  // ~4 per candidate.
  KeptGrid(const Corners& c, const std::vector<int64_t>& order) {
    float lo_y = std::numeric_limits<float>::max(), lo_x = lo_y, hi_y = -lo_y, hi_x = -lo_y;
    std::vector<float> sides;
    sides.reserve(order.size());
    for (int64_t i : order) {
      if (!finite(c, i)) continue;
      lo_y = std::min(lo_y, c.y1[i]), lo_x = std::min(lo_x, c.x1[i]);
      hi_y = std::max(hi_y, c.y2[i]), hi_x = std::max(hi_x, c.x2[i]);
      sides.push_back(std::max(c.y2[i] - c.y1[i], c.x2[i] - c.x1[i]));
    }
    if (sides.empty()) return;  // every box goes to the wide list
    std::nth_element(sides.begin(), sides.begin() + sides.size() / 2, sides.end());
    const double span_y = std::max(double{hi_y} - lo_y, 1e-30),
                 span_x = std::max(double{hi_x} - lo_x, 1e-30);
    double cell = std::max(double{sides[sides.size() / 2]}, 1e-30);
    const double max_cells = 4.0 * static_cast<double>(order.size()) + 64;
    while ((span_y / cell + 1) * (span_x / cell + 1) > max_cells) cell *= 1.5;
    origin_y_ = lo_y, origin_x_ = lo_x, inv_cell_ = 1.0 / cell;
    rows_ = static_cast<int64_t>(span_y / cell) + 1;
    cols_ = static_cast<int64_t>(span_x / cell) + 1;
    head_.assign(static_cast<size_t>(rows_ * cols_), -1);
  }

  // The cells a box covers, as [r0, r1] x [c0, c1]; false if it is to be tested against every
  // kept box (non-finite corners, or more than kMaxCells cells).
  bool cells(const Corners& c, int64_t i, int64_t r[2], int64_t k[2]) const {
    if (head_.empty() || !finite(c, i)) return false;
    r[0] = cell_of(c.y1[i], origin_y_, rows_), r[1] = cell_of(c.y2[i], origin_y_, rows_);
    k[0] = cell_of(c.x1[i], origin_x_, cols_), k[1] = cell_of(c.x2[i], origin_x_, cols_);
    return (r[1] - r[0] + 1) * (k[1] - k[0] + 1) <= kMaxCells;
  }

  void add(const Corners& c, int64_t i) {
    int64_t r[2], k[2];
    if (!cells(c, i, r, k)) {
      wide_.push_back(i);
      return;
    }
    for (int64_t y = r[0]; y <= r[1]; ++y)
      for (int64_t x = k[0]; x <= k[1]; ++x) {
        int64_t& head = head_[static_cast<size_t>(y * cols_ + x)];
        entries_.push_back({i, head});
        head = static_cast<int64_t>(entries_.size()) - 1;
      }
  }

  // Whether a kept box suppresses candidate i; `kept` lists them all, for wide candidates.
  bool suppressed(const Corners& c, int64_t i, const std::vector<int64_t>& kept,
                  float threshold) const {
    int64_t r[2], k[2];
    if (!cells(c, i, r, k)) {
      for (int64_t j : kept)
        if (suppresses(c, i, j, threshold)) return true;
      return false;
    }
    for (int64_t j : wide_)
      if (suppresses(c, i, j, threshold)) return true;
    for (int64_t y = r[0]; y <= r[1]; ++y)
      for (int64_t x = k[0]; x <= k[1]; ++x)
        for (int64_t e = head_[static_cast<size_t>(y * cols_ + x)]; e >= 0;
             e = entries_[static_cast<size_t>(e)].next)
          if (suppresses(c, i, entries_[static_cast<size_t>(e)].box, threshold)) return true;
    return false;
  }

 private:
  static constexpr int64_t kMaxCells = 64;
  static bool finite(const Corners& c, int64_t i) {
    return std::isfinite(c.y1[i]) && std::isfinite(c.x1[i]) && std::isfinite(c.y2[i]) &&
           std::isfinite(c.x2[i]);
  }
  // (Monotone in v, so two boxes that share an interior point share that point's cell.)
  int64_t cell_of(float v, double origin, int64_t count) const {
    const double t = std::floor((double{v} - origin) * inv_cell_);
    return std::clamp(static_cast<int64_t>(t), int64_t{0}, count - 1);
  }
  struct Entry {
    int64_t box, next;
  };
  double origin_y_ = 0, origin_x_ = 0, inv_cell_ = 1;
  int64_t rows_ = 0, cols_ = 0;
  std::vector<int64_t> head_;  // by cell: the latest entry, -1 if none
  std::vector<Entry> entries_;
  std::vector<int64_t> wide_;
};

// The boxes one class keeps, in selection order.
std::vector<int64_t> select_boxes(const Corners& c, const float* scores, int64_t n, int64_t max_out,
                                  float iou_threshold, const float* score_threshold) {
  std::vector<int64_t> order;
  order.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    if (!score_threshold || scores[i] > *score_threshold) order.push_back(i);
  // Highest score first, ties (and NaNs, last) by index: what a stable sort gives.
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    const bool na = std::isnan(scores[a]), nb = std::isnan(scores[b]);
    if (na != nb) return nb;
    if (!na && scores[a] != scores[b]) return scores[a] > scores[b];
    return a < b;
  });
  std::vector<int64_t> kept;
  if (max_out <= 0) return kept;
  // IoU never exceeds 1: nothing is suppressed.
  if (iou_threshold >= 1) {
    order.resize(std::min<size_t>(order.size(), static_cast<size_t>(max_out)));
    return order;
  }
  KeptGrid grid(c, order);
  for (int64_t i : order) {
    if (grid.suppressed(c, i, kept, iou_threshold)) continue;
    kept.push_back(i);
    if (static_cast<int64_t>(kept.size()) >= max_out) break;
    grid.add(c, i);
  }
  return kept;
}

// A tensor's values as floats: its own buffer where it holds float32 (the spec's type), else a
// converted copy.
class Floats {
 public:
  explicit Floats(const Tensor& t) {
    if (t.dtype() == DType::Float) {
      data_ = t.data<float>();
      return;
    }
    const std::vector<double> d = to_doubles(t);
    copy_.assign(d.begin(), d.end());
    data_ = copy_.data();
  }
  const float* data() const { return data_; }

 private:
  std::vector<float> copy_;
  const float* data_ = nullptr;
};

class NonMaxSuppression final : public Kernel {
 public:
  explicit NonMaxSuppression(const Node& n) : center_(n.attr_int("center_point_box", 0) != 0) {}
  void infer(InferContext& ctx) const override { ctx.set_output_unknown(0, DType::Int64); }
  void run(RunContext& ctx) const override {
    const Tensor &boxes_t = ctx.input(0), &scores_t = ctx.input(1);
    VOLT_CHECK(boxes_t.rank() == 3 && boxes_t.dim(2) == 4 && scores_t.rank() == 3, InvalidArgument,
               ctx.node().describe() +
                   ": boxes must be [batch, boxes, 4] and scores [batch, classes, boxes]");
    const int64_t batches = boxes_t.dim(0), n = boxes_t.dim(1), classes = scores_t.dim(1);
    VOLT_CHECK(scores_t.dim(0) == batches && scores_t.dim(2) == n, InvalidArgument,
               ctx.node().describe() + ": boxes and scores disagree");
    const int64_t max_out =
        ctx.has_input(2) && ctx.input(2).numel()
            ? to_int64_vector(ctx.input(2), ctx.node(), "max_output_boxes_per_class")[0]
            : 0;
    const float iou_threshold = ctx.has_input(3) && ctx.input(3).numel()
                                    ? static_cast<float>(to_doubles(ctx.input(3))[0])
                                    : 0.0f;
    VOLT_CHECK(iou_threshold >= 0 && iou_threshold <= 1, InvalidArgument,
               ctx.node().describe() + ": iou_threshold must be in [0, 1], got " +
                   std::to_string(iou_threshold));
    std::optional<float> score_threshold;
    if (ctx.has_input(4) && ctx.input(4).numel())
      score_threshold = static_cast<float>(to_doubles(ctx.input(4))[0]);
    const Floats boxes(boxes_t), scores(scores_t);

    std::vector<Corners> corners;
    corners.reserve(static_cast<size_t>(batches));
    for (int64_t b = 0; b < batches; ++b) {
      corners.emplace_back(static_cast<size_t>(n));
      to_corners(boxes.data() + b * n * 4, n, center_, corners.back());
    }
    // Classes (and batches) are independent: one selection each, in parallel when there are
    // several, concatenated in (batch, class) order.
    std::vector<std::vector<int64_t>> kept(static_cast<size_t>(batches * classes));
    parallel_for(batches * classes, batches * classes > 1 && n >= 256, [&](int64_t bk) {
      kept[static_cast<size_t>(bk)] =
          select_boxes(corners[static_cast<size_t>(bk / classes)], scores.data() + bk * n, n,
                       max_out, iou_threshold, score_threshold ? &*score_threshold : nullptr);
    });
    int64_t total = 0;
    for (const auto& k : kept) total += static_cast<int64_t>(k.size());
    Tensor& y = ctx.allocate_output(0, DType::Int64, {total, 3});
    int64_t* out = y.data<int64_t>();
    for (int64_t bk = 0; bk < batches * classes; ++bk)
      for (int64_t i : kept[static_cast<size_t>(bk)])
        *out++ = bk / classes, *out++ = bk % classes, *out++ = i;
  }

 private:
  bool center_;
};

}  // namespace

VOLT_REGISTER_KERNEL(nms, {.op = "NonMaxSuppression",
                           .since = 10,
                           .create = make_kernel<NonMaxSuppression>});

}  // namespace volt
