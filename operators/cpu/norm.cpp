// BatchNormalization (inference form: running statistics). f32 on oneDNN's batch
// normalization primitive; the reference loop covers other dtypes. In the channels-last region
// (volt.layout = NHWC: X is [N, H, W, C]) and with a fused Relu (volt.activation = Relu) from
// the passes, inference form only.
#include <cmath>

#include "operators/common/dispatch.hpp"
#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/simd_clones.hpp"
#include "operators/registry.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

// Constant statistics (the usual case after loading): y = x · scale[c] + shift[c] with both
// computed once per plan (`affine_scale` / `affine_shift`). oneDNN's primitive took 0.15-0.25 ms
// for DenseNet's 56x56x64..128 inputs at batch 1, several times the memory traffic's time.
// Statistics fed at run time go to oneDNN's primitive.
struct BatchNormState {
  std::vector<float> affine_scale, affine_shift;
  dnnl::batch_normalization_forward prim;
  dnnl::memory::desc data, scale, shift, stat, scratch;
};

// `rows` rows of `c` channels (channels-last, or channels-first with rows = N, c = C·inner
// written per plane: see run()).
VOLT_SIMD_CLONES void affine_rows(const float* x, int64_t rows, int64_t c, const float* scale,
                                  const float* shift, bool relu, float* y) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t ch = 0; ch < c; ++ch) {
      const float v = x[r * c + ch] * scale[ch] + shift[ch];
      y[r * c + ch] = relu && v < 0.0f ? 0.0f : v;
    }
}
VOLT_SIMD_CLONES void affine_plane(const float* x, int64_t n, float scale, float shift, bool relu,
                                   float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] * scale + shift;
    y[i] = relu && v < 0.0f ? 0.0f : v;
  }
}

class BatchNorm final : public Kernel {
 public:
  explicit BatchNorm(const Node& n)
      : epsilon_(n.attr_float("epsilon", 1e-5f)),
        momentum_(n.attr_float("momentum", 0.9f)),
        training_(n.attr_int("training_mode", 0) != 0),
        nhwc_(n.attr_string("volt.layout", "") == "NHWC"),
        relu_(n.attr_string("volt.activation", "") == "Relu") {
    VOLT_CHECK(n.attr_int("spatial", 1) == 1, NotImplemented,
               n.describe() + ": spatial=0 is not supported");
    VOLT_CHECK(relu_ == n.has_attr("volt.activation"), InvalidModel,
               n.describe() + ": volt.activation must be Relu");
    VOLT_CHECK(!training_ || (!nhwc_ && !relu_), InvalidModel,
               n.describe() + ": volt.layout and volt.activation are for the inference form");
  }
  void infer(InferContext& ctx) const override {
    const Shape& x = ctx.shape(0);
    VOLT_CHECK(nhwc_ ? x.size() == 4 : x.size() >= 2, InvalidArgument,
               ctx.node().describe() + ": input must be N x C x ..., got " + shape_str(x));
    const int64_t channels = nhwc_ ? x[3] : x[1];
    for (size_t i = 1; i <= 4; ++i)
      VOLT_CHECK(numel_of(ctx.shape(i)) == channels, InvalidArgument,
                 ctx.node().describe() + ": input " + std::to_string(i) + " has shape " +
                     shape_str(ctx.shape(i)) + ", expected [" + std::to_string(channels) + "]");
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
    if (ctx.input_tensor(1) && ctx.input_tensor(2) && ctx.input_tensor(3) && ctx.input_tensor(4)) {
      auto st = std::make_shared<BatchNormState>();
      for (int64_t ch = 0; ch < channels; ++ch) {
        auto at = [&](size_t i) { return double{ctx.input_tensor(i)->data<float>()[ch]}; };
        const double scale = at(1) / std::sqrt(at(4) + static_cast<double>(epsilon_));
        st->affine_scale.push_back(static_cast<float>(scale));
        st->affine_shift.push_back(static_cast<float>(at(2) - at(3) * scale));
      }
      ctx.set_state(st);
      return;
    }
    dnnl_adapter::prepare_or_fall_back(ctx, [&] {
      auto st = std::make_shared<BatchNormState>();
      // Channels-last: the logical N, C, H, W over the [N, H, W, C] buffer.
      st->data = nhwc_ ? dnnl::memory::desc({x[0], x[3], x[1], x[2]}, dnnl::memory::data_type::f32,
                                            dnnl::memory::format_tag::nhwc)
                       : dnnl_adapter::plain_md(x, dnnl::memory::data_type::f32);
      st->stat = dnnl_adapter::plain_md({channels}, dnnl::memory::data_type::f32);
      st->scale = st->shift = st->stat;
      auto flags = dnnl::normalization_flags::use_global_stats |
                   dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
      if (relu_) flags |= dnnl::normalization_flags::fuse_norm_relu;
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
    const auto* st = static_cast<const BatchNormState*>(ctx.state_ptr());
    if (st && !st->affine_scale.empty()) {
      const float* px = x.data<float>();
      float* py = ctx.output(0).data<float>();
      const float *scale = st->affine_scale.data(), *shift = st->affine_shift.data();
      const int64_t c = static_cast<int64_t>(st->affine_scale.size());
      if (nhwc_ || x.numel() == x.dim(0) * c) {  // channels last, or nothing after C
        parallel_chunks(x.numel() / c, std::max<int64_t>(1, 16384 / c),
                        [&](int64_t lo, int64_t hi) {
                          affine_rows(px + lo * c, hi - lo, c, scale, shift, relu_, py + lo * c);
                        });
      } else {
        const int64_t inner = x.numel() / (x.dim(0) * c);
        parallel_for(x.dim(0) * c, x.numel() > 16384, [&](int64_t plane) {
          affine_plane(px + plane * inner, inner, scale[plane % c], shift[plane % c], relu_,
                       py + plane * inner);
        });
      }
      return;
    }
    if (st) {
      dnnl_adapter::execute(st->prim,
                            {{DNNL_ARG_SRC, st->data, x.raw()},
                             {DNNL_ARG_SCALE, st->scale, ctx.input(1).raw()},
                             {DNNL_ARG_SHIFT, st->shift, ctx.input(2).raw()},
                             {DNNL_ARG_MEAN, st->stat, ctx.input(3).raw()},
                             {DNNL_ARG_VARIANCE, st->stat, ctx.input(4).raw()},
                             {DNNL_ARG_DST, st->data, ctx.output(0).raw()}},
                            st->scratch, ctx.scratch());
      return;
    }
    // Channels-last is channels-first with one "image" per pixel: [N·H·W, C, 1].
    const int64_t c = nhwc_ ? x.dim(3) : x.dim(1);
    const int64_t n = nhwc_ ? x.numel() / std::max<int64_t>(c, 1) : x.dim(0);
    const int64_t inner = x.numel() / std::max<int64_t>(n * c, 1);
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
            for (int64_t i = 0; i < inner; ++i) {
              const C v = static_cast<C>(px[off + i]) * sc + sh;
              py[off + i] = static_cast<T>(relu_ && v < C(0) ? C(0) : v);
            }
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
  bool nhwc_;  // X is [N, H, W, C] (the channels-last region)
  bool relu_;  // a Relu fused after it
};

}  // namespace

VOLT_REGISTER_KERNEL(batch_norm, {.op = "BatchNormalization",
                                  .types = kFloatTypes,
                                  .inplace_input = 0,
                                  .create = make_kernel<BatchNorm>});

}  // namespace volt
