// ai.volt EmbeddingBag: the Loop torch.onnx writes for torch.nn.EmbeddingBag, as one node
// (runtime/passes/fuse_embedding_bag.cpp). Inputs: weight [R, D...] (float), indices [N, Q...]
// (int32 or int64), starts and ends (1-D, int32 or int64), the trip count M (int64 scalar) and
// optionally per-sample weights [N] (each row times its index's weight, for 1-D indices into a
// 2-D weight: where the Loop's Mul would broadcast other shapes, this is an error); output
// [M, Q..., D...]. Bag i holds indices[s:e] along axis 0, s and e being starts[i] and
// ends[i] clamped as Slice clamps them, and is the sum, mean or max (attribute mode) of the
// weight rows they pick, as the Loop's ReduceSum, ReduceMean or ReduceMax would give it: an empty
// bag sums and averages to 0 (volt's ReduceMean over an empty axis, and torch's
// EmbeddingBag) and has the maximum -inf. Every index is checked before
// any bag is computed, so a bad one is an error naming it, as Gather's would be, and the bags
// then run in parallel.
#include <cmath>
#include <limits>

#include "operators/common/parallel.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/common/slice_window.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

enum class BagMode { Sum, Mean, Max };

BagMode bag_mode(const Node& n) {
  const std::string m = n.attr_string("mode", "sum");
  if (m == "sum") return BagMode::Sum;
  if (m == "mean") return BagMode::Mean;
  if (m == "max") return BagMode::Max;
  fail(ErrorCode::InvalidModel, n.describe() + ": mode must be sum, mean or max, got '" + m + "'");
}

bool index_type(DType t) {
  return t == DType::Int64 || t == DType::Int32;
}

int64_t element(const Tensor& t, int64_t i) {
  return t.dtype() == DType::Int64 ? t.data<int64_t>()[i] : t.data<int32_t>()[i];
}

class EmbeddingBag final : public Kernel {
 public:
  explicit EmbeddingBag(const Node& n) : mode_(bag_mode(n)) {}

  void infer(InferContext& ctx) const override {
    if (ctx.input_count() < 5 || ctx.input_count() > 6)
      ctx.error("takes weight, indices, starts, ends, a trip count and per-sample weights");
    if (ctx.input_count() == 6 &&
        (ctx.dtype(5) != DType::Float || ctx.shape(5).size() != 1 || ctx.shape(1).size() != 1 ||
         ctx.shape(0).size() != 2 || ctx.shape(5)[0] != ctx.shape(1)[0]))
      ctx.input_error(
          "per-sample weights must be float, one per index of 1-D indices into a "
          "2-D weight, got " +
          shape_str(ctx.shape(5)) + " for indices " + shape_str(ctx.shape(1)));
    if (ctx.dtype(0) != DType::Float || ctx.shape(0).empty())
      ctx.input_error("the weight must be a float tensor of rank 1 or more");
    if (!index_type(ctx.dtype(1)) || ctx.shape(1).empty())
      ctx.input_error("the indices must be int32 or int64, of rank 1 or more");
    for (size_t i : {2, 3})
      if (!index_type(ctx.dtype(i)) || ctx.shape(i).size() != 1)
        ctx.input_error("the bags' starts and ends must be 1-D int32 or int64 tensors");
    if (ctx.dtype(4) != DType::Int64 || numel_of(ctx.shape(4)) != 1)
      ctx.input_error("the trip count must be one int64");
    const Tensor* trips = ctx.input_tensor(4);
    if (!trips) {
      ctx.set_output_unknown(0, DType::Float);
      return;
    }
    const int64_t bags = trips_of(*trips);
    // A bag needs a start and an end (the Loop's Gather of them would fail): checked here,
    // before the trip count sizes the output and the scratch, so 2^62 trips cannot overflow.
    const int64_t bounds = std::min(ctx.shape(2)[0], ctx.shape(3)[0]);
    if (bags > bounds)
      ctx.input_error("bag " + std::to_string(bounds) + " of " + std::to_string(bags) +
                      " has no bound: starts has " + std::to_string(ctx.shape(2)[0]) +
                      " and ends " + std::to_string(ctx.shape(3)[0]));
    ctx.set_output(0, DType::Float, output_shape(ctx.shape(0), ctx.shape(1), bags));
    ctx.request_scratch(scratch_words(bags, numel_of(ctx.shape(1))) * sizeof(int64_t));
  }

  void run(RunContext& ctx) const override {
    const Tensor &weight = ctx.input(0), &indices = ctx.input(1), &starts = ctx.input(2),
                 &ends = ctx.input(3);
    const int64_t bags = trips_of(ctx.input(4));
    Tensor& y = ctx.output(0);  // (infer knows the trip count by run time, and so the shape)
    const int64_t rows = weight.dim(0), n = indices.dim(0);
    const int64_t width = weight.numel() / std::max<int64_t>(rows, 1);
    const int64_t per_row = indices.numel() / std::max<int64_t>(n, 1);  // Q...
    // The bounds and the indices the bags read, checked here: the loop below may not throw.
    // (In the run's scratch: a recommender runs one such node per feature, every run.)
    int64_t* from = static_cast<int64_t*>(ctx.scratch());
    int64_t* to = from + bags;
    int64_t* picked = to + bags;
    std::fill(picked, picked + indices.numel(), int64_t{-1});
    int64_t work = 0;
    for (int64_t i = 0; i < bags; ++i) {  // (infer checked that every bag has bounds)
      from[i] = clamp_slice_bound(element(starts, i), n);
      to[i] = std::max(from[i], clamp_slice_bound(element(ends, i), n));
      for (int64_t k = from[i] * per_row; k < to[i] * per_row; ++k) {
        if (picked[k] >= 0) continue;
        const int64_t at = element(indices, k);
        if (at < -rows || at >= rows)
          ctx.input_error("index " + std::to_string(at) + " is out of range [" +
                          std::to_string(-rows) + ", " + std::to_string(rows) + ")");
        picked[k] = at < 0 ? at + rows : at;
      }
      work += (to[i] - from[i]) * per_row * width;
    }
    const float* w = weight.data<float>();
    const float* sample_weight = ctx.input_count() == 6 ? ctx.input(5).data<float>() : nullptr;
    float* out = y.data<float>();
    const BagMode mode = mode_;
    parallel_for(bags, ctx.threads() > 1 && work > (1 << 15), [&](int64_t i) {
      for (int64_t q = 0; q < per_row; ++q) {
        float* o = out + (i * per_row + q) * width;
        const float start = mode == BagMode::Max ? -std::numeric_limits<float>::infinity() : 0.0f;
        std::fill(o, o + width, start);
        for (int64_t r = from[i]; r < to[i]; ++r) {
          const float* row = w + picked[r * per_row + q] * width;
          if (sample_weight) {
            const float f = sample_weight[r];
            if (mode == BagMode::Max)
              for (int64_t d = 0; d < width; ++d) o[d] = row[d] * f > o[d] ? row[d] * f : o[d];
            else
              for (int64_t d = 0; d < width; ++d) o[d] += row[d] * f;
          } else if (mode == BagMode::Max) {
            for (int64_t d = 0; d < width; ++d) o[d] = row[d] > o[d] ? row[d] : o[d];
          } else {
            for (int64_t d = 0; d < width; ++d) o[d] += row[d];
          }
        }
        if (mode == BagMode::Mean && to[i] > from[i]) {
          const float count = static_cast<float>(to[i] - from[i]);
          for (int64_t d = 0; d < width; ++d) o[d] /= count;
        }
      }
    });
  }

 private:
  static int64_t trips_of(const Tensor& t) { return std::max<int64_t>(element(t, 0), 0); }
  // The scratch a run takes: each bag's bounds, and each index resolved.
  static size_t scratch_words(int64_t bags, int64_t indices) {
    return static_cast<size_t>(2 * bags + indices);
  }
  static Shape output_shape(const Shape& weight, const Shape& indices, int64_t bags) {
    Shape s{bags};
    s.insert(s.end(), indices.begin() + 1, indices.end());
    s.insert(s.end(), weight.begin() + 1, weight.end());
    return s;
  }
  BagMode mode_;
};

}  // namespace

VOLT_REGISTER_KERNEL(embedding_bag, volt_kernel("EmbeddingBag", make_kernel<EmbeddingBag>));

}  // namespace volt
