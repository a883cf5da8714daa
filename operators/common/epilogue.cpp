#include "operators/common/epilogue.hpp"
#include "operators/common/parallel.hpp"

#include "operators/common/dispatch.hpp"
#include "operators/common/shape_util.hpp"

namespace volt {

void check_epilogue(InferContext& ctx, const Shape& y, bool bias) {
  const Node& node = ctx.node();
  if (bias && ctx.has_input(2)) {
    VOLT_CHECK(!y.empty() && ctx.shape(2) == Shape{y.back()}, InvalidArgument,
               node.describe() + ": bias must have shape [" +
                   (y.empty() ? std::string("?") : std::to_string(y.back())) + "], got " +
                   shape_str(ctx.shape(2)));
    VOLT_CHECK(ctx.dtype(2) == ctx.dtype(0), InvalidModel,
               node.describe() + ": bias has another dtype than the product");
  }
  if (ctx.has_input(3)) {
    VOLT_CHECK(broadcast_shapes({y, ctx.shape(3)}, node) == y, InvalidArgument,
               node.describe() + ": residual of shape " + shape_str(ctx.shape(3)) +
                   " does not broadcast to the output " + shape_str(y));
    VOLT_CHECK(ctx.dtype(3) == ctx.dtype(0), InvalidModel,
               node.describe() + ": residual has another dtype than the product");
  }
}

void apply_epilogue(Tensor& y, const Tensor* bias, const FusedActivation& act,
                    const Tensor* residual, const Node& node) {
  if (!bias && !act.any() && !residual) return;
  dispatch_numeric(y.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = typename Compute<T>::type;
    if constexpr (std::is_floating_point_v<C>) {
      T* py = static_cast<T*>(y.raw());
      const int64_t n = y.rank() ? y.shape().back() : 1;
      const T* pb = bias ? static_cast<const T*>(bias->raw()) : nullptr;
      parallel_chunks(y.numel(), 65536, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          C v = static_cast<C>(py[i]);
          if (pb) v += static_cast<C>(pb[i % n]);
          py[i] = static_cast<T>(act.apply(v));
        }
      });
    } else {
      fail(ErrorCode::InvalidModel, node.describe() + ": a fused epilogue needs floating point");
    }
  });
  if (residual) add_broadcast(y, *residual, node);
}

void add_broadcast(Tensor& y, const Tensor& r, const Node& node) {
  dispatch_numeric(y.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = typename Compute<T>::type;
    if constexpr (std::is_floating_point_v<C>) {
      T* py = static_cast<T*>(y.raw());
      const T* pr = static_cast<const T*>(r.raw());
      BroadcastIterator(y.shape(), {broadcast_strides(r.shape(), y.shape())})
          .for_each([&, e = int64_t{0}](const int64_t* off) mutable {
            py[e] = static_cast<T>(static_cast<C>(py[e]) + static_cast<C>(pr[off[0]]));
            ++e;
          });
    } else {
      fail(ErrorCode::InvalidModel, node.describe() + ": a fused residual needs floating point");
    }
  });
}

}  // namespace volt
