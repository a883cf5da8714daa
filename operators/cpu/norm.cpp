// BatchNormalization (inference form: running statistics). f32 on oneDNN's batch
// normalization primitive; the reference loop covers other dtypes.
#include <cmath>

#include "operators/common/dispatch.hpp"
#include "operators/common/dnnl_adapter.hpp"
#include "operators/registry.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

struct BatchNormState {
  dnnl::batch_normalization_forward prim;
  dnnl::memory::desc data, scale, shift, stat, scratch;
};

class BatchNorm final : public Kernel {
 public:
  explicit BatchNorm(const Node& n)
      : epsilon_(n.attr_float("epsilon", 1e-5f)),
        momentum_(n.attr_float("momentum", 0.9f)),
        training_(n.attr_int("training_mode", 0) != 0) {
    VOLT_CHECK(n.attr_int("spatial", 1) == 1, NotImplemented,
               n.describe() + ": spatial=0 is not supported");
  }
  void infer(InferContext& ctx) const override {
    const Shape& x = ctx.shape(0);
    VOLT_CHECK(x.size() >= 2, InvalidArgument,
               ctx.node().describe() + ": input must be N x C x ..., got " + shape_str(x));
    for (size_t i = 1; i <= 4; ++i)
      VOLT_CHECK(numel_of(ctx.shape(i)) == x[1], InvalidArgument,
                 ctx.node().describe() + ": input " + std::to_string(i) + " has shape " +
                     shape_str(ctx.shape(i)) + ", expected [" + std::to_string(x[1]) + "]");
    ctx.set_output(0, ctx.dtype(0), x);
    // Training mode (opset 14+): batch statistics, and the updated running statistics.
    if (training_) {
      if (ctx.output_count() > 1) ctx.set_output(1, ctx.dtype(3), ctx.shape(3));
      if (ctx.output_count() > 2) ctx.set_output(2, ctx.dtype(4), ctx.shape(4));
      return;
    }
    if (ctx.dtype(0) != DType::Float || numel_of(x) == 0) return;
    for (size_t i = 1; i <= 4; ++i)
      if (ctx.dtype(i) != DType::Float) return;
    dnnl_adapter::prepare_or_fall_back(ctx, [&] {
      auto st = std::make_shared<BatchNormState>();
      st->data = dnnl_adapter::plain_md(x, dnnl::memory::data_type::f32);
      st->stat = dnnl_adapter::plain_md({x[1]}, dnnl::memory::data_type::f32);
      st->scale = st->shift = st->stat;
      const auto flags = dnnl::normalization_flags::use_global_stats |
                         dnnl::normalization_flags::use_scale |
                         dnnl::normalization_flags::use_shift;
      dnnl::batch_normalization_forward::desc d(dnnl::prop_kind::forward_inference, st->data,
                                                epsilon_, flags);
      dnnl::batch_normalization_forward::primitive_desc pd(d, dnnl_adapter::scratch_attr(),
                                                           dnnl_adapter::engine());
      st->prim = dnnl::batch_normalization_forward(pd);
      st->scratch = pd.scratchpad_desc();
      ctx.request_scratch(st->scratch.get_size());
      ctx.set_state(st);
    });
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    if (const auto* st = static_cast<const BatchNormState*>(ctx.state_ptr())) {
      dnnl_adapter::execute(st->prim,
                            {{DNNL_ARG_SRC, dnnl_adapter::wrap(st->data, x.raw())},
                             {DNNL_ARG_SCALE, dnnl_adapter::wrap(st->scale, ctx.input(1).raw())},
                             {DNNL_ARG_SHIFT, dnnl_adapter::wrap(st->shift, ctx.input(2).raw())},
                             {DNNL_ARG_MEAN, dnnl_adapter::wrap(st->stat, ctx.input(3).raw())},
                             {DNNL_ARG_VARIANCE, dnnl_adapter::wrap(st->stat, ctx.input(4).raw())},
                             {DNNL_ARG_DST, dnnl_adapter::wrap(st->data, ctx.output(0).raw())}},
                            st->scratch, ctx.scratch());
      return;
    }
    const int64_t n = x.dim(0), c = x.dim(1), inner = x.numel() / std::max<int64_t>(n * c, 1);
    dispatch_numeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!std::is_floating_point_v<typename Compute<T>::type>) {
        ctx.error("needs floating-point inputs");
      } else {
        using C = typename Compute<T>::type;
        // Statistics may have another float type than X (opset 15): read them as double.
        std::vector<double> scale(c), shift(c);
        auto read = [&](size_t i, int64_t ch) {
          return dispatch_numeric(ctx.input(i).dtype(), [&](auto t2) -> double {
            using S = typename decltype(t2)::type;
            if constexpr (std::is_same_v<S, bool>)
              return 0.0;
            else
              return static_cast<double>(static_cast<typename Compute<S>::type>(
                  static_cast<const S*>(ctx.input(i).raw())[ch]));
          });
        };
        const T* px = static_cast<const T*>(x.raw());
        for (int64_t ch = 0; ch < c; ++ch) {
          double mean = read(3, ch), var = read(4, ch);
          if (training_) {
            double s = 0, sq = 0;
            for (int64_t b = 0; b < n; ++b)
              for (int64_t i = 0; i < inner; ++i) {
                const double v = static_cast<double>(static_cast<C>(px[(b * c + ch) * inner + i]));
                s += v;
                sq += v * v;
              }
            const double count = static_cast<double>(n * inner);
            const double batch_mean = s / count, batch_var = sq / count - batch_mean * batch_mean;
            if (ctx.has_output(1))
              write_stat(ctx.output(1), ch, mean * momentum_ + batch_mean * (1 - momentum_));
            if (ctx.has_output(2))
              write_stat(ctx.output(2), ch, var * momentum_ + batch_var * (1 - momentum_));
            mean = batch_mean;
            var = batch_var;
          }
          scale[ch] = read(1, ch) / std::sqrt(var + static_cast<double>(epsilon_));
          shift[ch] = read(2, ch) - mean * scale[ch];
        }
        T* py = static_cast<T*>(ctx.output(0).raw());
#pragma omp parallel for collapse(2)
        for (int64_t b = 0; b < n; ++b)
          for (int64_t ch = 0; ch < c; ++ch) {
            const C sc = static_cast<C>(scale[ch]), sh = static_cast<C>(shift[ch]);
            const int64_t off = (b * c + ch) * inner;
            for (int64_t i = 0; i < inner; ++i)
              py[off + i] = static_cast<T>(static_cast<C>(px[off + i]) * sc + sh);
          }
      }
    });
  }

 private:
  static void write_stat(Tensor& t, int64_t i, double v) {
    dispatch_numeric(t.dtype(), [&](auto tag) {
      using S = typename decltype(tag)::type;
      if constexpr (!std::is_same_v<S, bool>)
        static_cast<S*>(t.raw())[i] = static_cast<S>(static_cast<typename Compute<S>::type>(v));
    });
  }
  float epsilon_, momentum_;
  bool training_;
};

}  // namespace

VOLT_REGISTER_KERNEL(batch_norm, {.op = "BatchNormalization",
                                  .types = kFloatTypes,
                                  .inplace_input = 0,
                                  .create = make_kernel<BatchNorm>});

}  // namespace volt
