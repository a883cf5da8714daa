// Gradient rules of InstanceNormalization, MeanVarianceNormalization and LRN, written with
// standard ops. The first two both normalize x over some axes, y = (x - mean) / sqrt(var + eps),
// and for such a normalization dx = rstd * (dy - mean(dy) - xhat * mean(dy * xhat)) over the same
// axes.
#include "operators/grad/gradient_rule.hpp"

namespace volt {
namespace {

std::string i64(GradEmitter& e, std::vector<int64_t> v, bool scalar = false) {
  const int64_t n = static_cast<int64_t>(v.size());
  return e.constant(Tensor::from<int64_t>(std::move(v), scalar ? Shape{} : Shape{n}));
}

struct Normalized {
  std::string dx, xhat;
};

// x normalized over `axes` (a 1-D int64 value) with `epsilon`; dxhat the gradient of the
// normalized value.
Normalized normalized_grad(GradEmitter& e, const std::string& x, const std::string& dxhat,
                           const std::string& axes, float epsilon) {
  auto mean = [&](const std::string& v) { return e.emit1("ReduceMean", {v, axes}); };
  const std::string centered = e.emit1("Sub", {x, mean(x)});
  const std::string var = mean(e.emit1("Mul", {centered, centered}));
  const std::string eps = e.emit1("CastLike", {e.constant(Tensor::scalar(epsilon)), x});
  const std::string rstd = e.emit1("Reciprocal", {e.emit1("Sqrt", {e.emit1("Add", {var, eps})})});
  const std::string xhat = e.emit1("Mul", {centered, rstd});
  const std::string inner =
      e.emit1("Sub", {e.emit1("Sub", {dxhat, mean(dxhat)}),
                      e.emit1("Mul", {xhat, mean(e.emit1("Mul", {dxhat, xhat}))})});
  return {e.emit1("Mul", {rstd, inner}), xhat};
}

// y = scale[c] * xhat + bias[c], xhat normalized over the axes after the channel's.
void instance_norm(GradEmitter& e) {
  const std::string x = e.input(0), g = e.grad_of_output(0);
  const std::string rank = e.emit1("Size", {e.shape_of(x)});
  const std::string spatial =
      e.emit1("Range", {i64(e, {2}, true), rank, i64(e, {1}, true)});  // 2 .. rank-1
  const std::string per_channel = e.emit1(                             // scale as [C, 1, ..., 1]
      "Unsqueeze",
      {e.input(1), e.emit1("Range", {i64(e, {1}, true), e.emit1("Sub", {rank, i64(e, {1}, true)}),
                                     i64(e, {1}, true)})});
  const Normalized n = normalized_grad(e, x, e.emit1("Mul", {g, per_channel}), spatial,
                                       e.node().attr_float("epsilon", 1e-5f));
  if (e.needs_grad(0)) e.set_grad(0, n.dx);
  const std::string all_but_channel =
      e.emit1("Concat", {i64(e, {0}), spatial}, {{"axis", int_attr(0)}});
  auto sum = [&](const std::string& v) {
    return e.emit1("ReduceSum", {v, all_but_channel}, {{"keepdims", int_attr(0)}});
  };
  if (e.needs_grad(1)) e.set_grad(1, sum(e.emit1("Mul", {g, n.xhat})));
  if (e.needs_grad(2)) e.set_grad(2, sum(g));
}

void mean_variance_norm(GradEmitter& e) {
  if (!e.needs_grad(0)) return;
  const std::string axes = i64(e, e.node().attr_ints("axes", {0, 2, 3}));
  // The kernel's epsilon (operators/cpu/normalization.cpp): it keeps a constant input finite.
  e.set_grad(0, normalized_grad(e, e.input(0), e.grad_of_output(0), axes, 1e-9f).dx);
}

// LRN: y = x d^-beta with d = bias + alpha/size * (sum of x^2 over a window of channels), so
// dx = dy d^-beta - 2 alpha beta / size * x * W'(dy x d^(-beta-1)), W' the window's adjoint (the
// same window mirrored). Window sums over channels are an AveragePool over a unit axis put
// before them, times the window's size.
void lrn(GradEmitter& e) {
  if (!e.needs_grad(0)) return;
  const Node& n = e.node();
  const std::string x = e.input(0), g = e.grad_of_output(0);
  const int64_t size = n.attr_int("size");
  const float alpha = n.attr_float("alpha", 1e-4f), beta = n.attr_float("beta", 0.75f),
              bias = n.attr_float("bias", 1.0f);
  const int64_t rank = e.static_shape(x) ? static_cast<int64_t>(e.static_shape(x)->size()) : 4;
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  const std::string unit_axis = i64(e, {1});
  auto window_sum = [&](const std::string& v, int64_t lo, int64_t hi) {
    std::vector<int64_t> kernel(static_cast<size_t>(rank - 1), 1), pads(2 * (rank - 1), 0);
    kernel[0] = size;
    pads[0] = lo;
    pads[static_cast<size_t>(rank - 1)] = hi;
    const std::string avg = e.emit1("AveragePool", {e.emit1("Unsqueeze", {v, unit_axis})},
                                    {{"kernel_shape", ints_attr(kernel)},
                                     {"pads", ints_attr(pads)},
                                     {"count_include_pad", int_attr(1)}});
    return e.scale(e.emit1("Squeeze", {avg, unit_axis}), static_cast<float>(size));
  };
  auto like_x = [&](float v) { return e.emit1("CastLike", {e.constant(Tensor::scalar(v)), x}); };
  const std::string d =
      e.emit1("Add", {like_x(bias), e.scale(window_sum(e.emit1("Mul", {x, x}), before, after),
                                            alpha / static_cast<float>(size))});
  const std::string term =
      e.emit1("Mul", {e.emit1("Mul", {g, x}), e.emit1("Pow", {d, like_x(-beta - 1)})});
  const std::string back = e.emit1("Mul", {x, window_sum(term, after, before)});
  e.set_grad(0, e.emit1("Sub", {e.emit1("Mul", {g, e.emit1("Pow", {d, like_x(-beta)})}),
                                e.scale(back, 2 * alpha * beta / static_cast<float>(size))}));
}

}  // namespace

VOLT_REGISTER_GRADIENT(lrn, "LRN", lrn);
VOLT_REGISTER_GRADIENT(instance_norm, "InstanceNormalization", instance_norm);
VOLT_REGISTER_GRADIENT(mean_variance_norm, "MeanVarianceNormalization", mean_variance_norm);

}  // namespace volt
