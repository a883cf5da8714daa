// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, with class weights, ignore_index and
// the reductions none, sum and mean (weighted mean over the targets not ignored).
#include <cmath>

#include "operators/common/dispatch.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/common/tensor_values.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

enum class LossReduction { None, Sum, Mean };

LossReduction reduction_of(const Node& n) {
  const std::string r = n.attr_string("reduction", "mean");
  if (r == "none") return LossReduction::None;
  if (r == "sum") return LossReduction::Sum;
  VOLT_CHECK(r == "mean", InvalidModel,
             n.describe() + ": reduction must be none, sum or mean, got '" + r + "'");
  return LossReduction::Mean;
}

Shape loss_shape(const Shape& input, LossReduction r) {
  if (r != LossReduction::None) return {};
  Shape s{input[0]};
  s.insert(s.end(), input.begin() + 2, input.end());
  return s;
}

// log_prob: [N, C, d...] as double; returns the loss tensor in `dtype`.
template <class T>
void nll(const std::vector<double>& log_prob, const Shape& shape, const Tensor& target,
         const Tensor* weight, int64_t ignore_index, bool has_ignore, LossReduction r, Tensor& out,
         const Node& node) {
  const int64_t n = shape[0], c = shape[1], inner = numel_of(shape) / std::max<int64_t>(n * c, 1);
  Shape expected{n};
  expected.insert(expected.end(), shape.begin() + 2, shape.end());
  VOLT_CHECK(target.shape() == expected, InvalidArgument,
             node.describe() + ": target has shape " + shape_str(target.shape()) + ", expected " +
                 shape_str(expected) + " for input " + shape_str(shape));
  const auto t = to_int64_vector(target, node, "target");
  std::vector<double> losses(static_cast<size_t>(n * inner));
  double total = 0, weight_sum = 0;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t cls = t[b * inner + i];
      double l = 0, w = 0;
      if (!(has_ignore && cls == ignore_index)) {
        VOLT_CHECK(cls >= 0 && cls < c, InvalidArgument,
                   node.describe() + ": target class " + std::to_string(cls) +
                       " is out of range [0, " + std::to_string(c) + ")");
        w = weight ? dispatch_numeric(
                         weight->dtype(),
                         [&](auto tag) -> double {
                           using W = typename decltype(tag)::type;
                           return static_cast<double>(static_cast<typename Compute<W>::type>(
                               static_cast<const W*>(weight->raw())[cls]));
                         })
                   : 1.0;
        l = -log_prob[(b * c + cls) * inner + i] * w;
      }
      losses[b * inner + i] = l;
      total += l;
      weight_sum += w;
    }
  T* o = static_cast<T*>(out.raw());
  using C = typename Compute<T>::type;
  if (r == LossReduction::None) {
    for (size_t i = 0; i < losses.size(); ++i) o[i] = static_cast<T>(static_cast<C>(losses[i]));
  } else if (r == LossReduction::Sum) {
    o[0] = static_cast<T>(static_cast<C>(total));
  } else {
    o[0] = static_cast<T>(static_cast<C>(weight_sum == 0 ? 0.0 : total / weight_sum));
  }
}

class NllLoss final : public Kernel {
 public:
  explicit NllLoss(const Node& n)
      : r_(reduction_of(n)),
        has_ignore_(n.has_attr("ignore_index")),
        ignore_(n.attr_int("ignore_index", 0)) {}
  void infer(InferContext& ctx) const override {
    VOLT_CHECK(ctx.shape(0).size() >= 2, InvalidArgument,
               ctx.node().describe() + ": input must be N x C x ...");
    ctx.set_output(0, ctx.dtype(0), loss_shape(ctx.shape(0), r_));
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    dispatch_numeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      nll<T>(to_doubles(x), x.shape(), ctx.input(1), ctx.has_input(2) ? &ctx.input(2) : nullptr,
             ignore_, has_ignore_, r_, ctx.output(0), ctx.node());
    });
  }

 private:
  LossReduction r_;
  bool has_ignore_;
  int64_t ignore_;
};

class SoftmaxCrossEntropy final : public Kernel {
 public:
  explicit SoftmaxCrossEntropy(const Node& n)
      : r_(reduction_of(n)),
        has_ignore_(n.has_attr("ignore_index")),
        ignore_(n.attr_int("ignore_index", 0)) {}
  void infer(InferContext& ctx) const override {
    VOLT_CHECK(ctx.shape(0).size() >= 2, InvalidArgument,
               ctx.node().describe() + ": scores must be N x C x ...");
    ctx.set_output(0, ctx.dtype(0), loss_shape(ctx.shape(0), r_));
    if (ctx.output_count() > 1) ctx.set_output(1, ctx.dtype(0), ctx.shape(0));
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const Shape& s = x.shape();
    const int64_t n = s[0], c = s[1], inner = x.numel() / std::max<int64_t>(n * c, 1);
    std::vector<double> v = to_doubles(x);
    for (int64_t b = 0; b < n; ++b)
      for (int64_t i = 0; i < inner; ++i) {
        double mx = -INFINITY, sum = 0;
        for (int64_t k = 0; k < c; ++k) mx = std::max(mx, v[(b * c + k) * inner + i]);
        for (int64_t k = 0; k < c; ++k) sum += std::exp(v[(b * c + k) * inner + i] - mx);
        const double lse = mx + std::log(sum);
        for (int64_t k = 0; k < c; ++k) v[(b * c + k) * inner + i] -= lse;
      }
    dispatch_numeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      nll<T>(v, s, ctx.input(1), ctx.has_input(2) ? &ctx.input(2) : nullptr, ignore_, has_ignore_,
             r_, ctx.output(0), ctx.node());
      if (ctx.has_output(1)) {
        T* lp = static_cast<T*>(ctx.output(1).raw());
        for (size_t i = 0; i < v.size(); ++i)
          lp[i] = static_cast<T>(static_cast<typename Compute<T>::type>(v[i]));
      }
    });
  }

 private:
  LossReduction r_;
  bool has_ignore_;
  int64_t ignore_;
};

}  // namespace

VOLT_REGISTER_KERNEL(nll_loss, {.op = "NegativeLogLikelihoodLoss",
                                .since = 12,
                                .types = kFloatTypes,
                                .create = make_kernel<NllLoss>});
VOLT_REGISTER_KERNEL(sce_loss, {.op = "SoftmaxCrossEntropyLoss",
                                .since = 12,
                                .types = kFloatTypes,
                                .create = make_kernel<SoftmaxCrossEntropy>});

}  // namespace volt
