// ConvTranspose: the gradient of Conv with respect to its input, as a reference scatter loop
// over every float type (N-d, groups, dilations, output_padding, output_shape, auto_pad).
#include "operators/common/dispatch.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

struct DeconvGeometry {
  int64_t n, c, m, group;
  std::vector<int64_t> in, kernel, strides, dilations, pad_begin, out;
};

class ConvTranspose final : public Kernel {
 public:
  explicit ConvTranspose(const Node& n)
      : group_(n.attr_int("group", 1)),
        kernel_shape_(n.attr_ints("kernel_shape")),
        strides_(n.attr_ints("strides")),
        dilations_(n.attr_ints("dilations")),
        pads_(n.attr_ints("pads")),
        output_padding_(n.attr_ints("output_padding")),
        output_shape_(n.attr_ints("output_shape")),
        auto_pad_(n.attr_string("auto_pad", "NOTSET")) {}

  void infer(InferContext& ctx) const override {
    const DeconvGeometry g = geometry(ctx.shape(0), ctx.shape(1), ctx.node());
    Shape out{g.n, g.m};
    out.insert(out.end(), g.out.begin(), g.out.end());
    if (ctx.has_input(2))
      VOLT_CHECK(numel_of(ctx.shape(2)) == g.m, InvalidArgument,
                 ctx.node().describe() + ": bias must have " + std::to_string(g.m) + " values");
    ctx.set_output(0, ctx.dtype(0), out);
  }

  void run(RunContext& ctx) const override {
    const Tensor &x = ctx.input(0), &w = ctx.input(1);
    const DeconvGeometry g = geometry(x.shape(), w.shape(), ctx.node());
    Tensor& y = ctx.output(0);
    dispatch_numeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = typename Compute<T>::type;
      if constexpr (!std::is_floating_point_v<C>) {
        ctx.error("needs floating-point inputs");
      } else {
        const size_t r = g.in.size();
        const int64_t in_sp = numel_of(g.in), out_sp = numel_of(g.out), k_sp = numel_of(g.kernel);
        const int64_t cg = g.c / g.group, mg = g.m / g.group;
        const T* px = static_cast<const T*>(x.raw());
        const T* pw = static_cast<const T*>(w.raw());
        const T* pb = ctx.has_input(2) ? static_cast<const T*>(ctx.input(2).raw()) : nullptr;
        std::vector<C> acc(static_cast<size_t>(g.n * g.m * out_sp), C(0));
#pragma omp parallel for collapse(2)
        for (int64_t b = 0; b < g.n; ++b)
          for (int64_t oc = 0; oc < g.m; ++oc) {
            const int64_t grp = oc / mg, ocg = oc % mg;
            C* dst = acc.data() + (b * g.m + oc) * out_sp;
            std::vector<int64_t> i_idx(r), k_idx(r);
            for (int64_t icg = 0; icg < cg; ++icg) {
              const int64_t ic = grp * cg + icg;
              const T* src = px + (b * g.c + ic) * in_sp;
              const T* wk = pw + (ic * mg + ocg) * k_sp;
              for (int64_t ip = 0; ip < in_sp; ++ip) {
                int64_t rem = ip;
                for (size_t d = r; d-- > 0;) {
                  i_idx[d] = rem % g.in[d];
                  rem /= g.in[d];
                }
                const C v = static_cast<C>(src[ip]);
                for (int64_t kp = 0; kp < k_sp; ++kp) {
                  int64_t krem = kp, off = 0;
                  bool inside = true;
                  for (size_t d = r; d-- > 0;) {
                    k_idx[d] = krem % g.kernel[d];
                    krem /= g.kernel[d];
                  }
                  for (size_t d = 0; d < r && inside; ++d) {
                    const int64_t o =
                        i_idx[d] * g.strides[d] + k_idx[d] * g.dilations[d] - g.pad_begin[d];
                    inside = o >= 0 && o < g.out[d];
                    off = off * g.out[d] + o;
                  }
                  if (inside) dst[off] += v * static_cast<C>(wk[kp]);
                }
              }
            }
            for (int64_t o = 0; o < out_sp; ++o) dst[o] += pb ? static_cast<C>(pb[oc]) : C(0);
          }
        T* py = static_cast<T*>(y.raw());
        for (size_t i = 0; i < acc.size(); ++i) py[i] = static_cast<T>(acc[i]);
      }
    });
  }

 private:
  DeconvGeometry geometry(const Shape& x, const Shape& w, const Node& node) const {
    VOLT_CHECK(x.size() >= 3 && w.size() == x.size(), InvalidArgument,
               node.describe() + ": X " + shape_str(x) + " and W " + shape_str(w) +
                   " must be N x C x spatial and C x M/group x kernel");
    VOLT_CHECK(w[0] == x[1], InvalidArgument,
               node.describe() + ": W has " + std::to_string(w[0]) + " input channels, X has " +
                   std::to_string(x[1]));
    const size_t r = x.size() - 2;
    DeconvGeometry g{x[0],
                     x[1],
                     w[1] * group_,
                     group_,
                     {x.begin() + 2, x.end()},
                     {w.begin() + 2, w.end()},
                     {},
                     {},
                     {},
                     {}};
    // kernel_shape, where given, must be the weights' own spatial shape (found by fuzzing: a
    // larger one read past W).
    VOLT_CHECK(kernel_shape_.empty() || kernel_shape_ == g.kernel, InvalidArgument,
               node.describe() + ": kernel_shape " + shape_str(kernel_shape_) +
                   " differs from the weights' " + shape_str(g.kernel));
    auto list = [&](const std::vector<int64_t>& v, int64_t fallback) {
      return v.empty() ? std::vector<int64_t>(r, fallback) : v;
    };
    g.strides = list(strides_, 1);
    g.dilations = list(dilations_, 1);
    const auto out_pad = list(output_padding_, 0);
    VOLT_CHECK(g.strides.size() == r && g.dilations.size() == r && out_pad.size() == r,
               InvalidModel,
               node.describe() +
                   ": strides, dilations and output_padding need one value per spatial axis");
    // output_shape names the spatial sizes (or the whole shape: its last r values are read).
    VOLT_CHECK(output_shape_.empty() || output_shape_.size() >= r, InvalidModel,
               node.describe() + ": output_shape " + shape_str(output_shape_) + " has fewer than " +
                   std::to_string(r) + " spatial sizes");
    g.pad_begin.assign(r, 0);
    g.out.resize(r);
    for (size_t i = 0; i < r; ++i) {
      const int64_t full =
          g.strides[i] * (g.in[i] - 1) + out_pad[i] + (g.kernel[i] - 1) * g.dilations[i] + 1;
      int64_t target = -1;
      if (!output_shape_.empty())
        target = output_shape_[output_shape_.size() - r + i];
      else if (auto_pad_ == "SAME_UPPER" || auto_pad_ == "SAME_LOWER")
        target = g.in[i] * g.strides[i];
      if (target >= 0) {
        // A negative total pads the end (output_shape larger than the natural size); halves
        // round toward minus infinity as in the spec's reference.
        const int64_t total = full - target;
        VOLT_CHECK(target <= 4 * full + 1024, InvalidArgument,
                   node.describe() +
                       ": output_shape is far larger than the transposed convolution produces");
        const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
        g.pad_begin[i] = auto_pad_ == "SAME_UPPER" ? half : total - half;
        g.out[i] = target;
      } else {
        int64_t pb = 0, pe = 0;
        if (!pads_.empty() && auto_pad_ != "VALID") {
          VOLT_CHECK(pads_.size() == 2 * r, InvalidModel,
                     node.describe() + ": pads needs two values per spatial axis");
          pb = pads_[i];
          pe = pads_[i + r];
        }
        g.pad_begin[i] = pb;
        g.out[i] = full - pb - pe;
        VOLT_CHECK(g.out[i] >= 0, InvalidArgument,
                   node.describe() + ": pads remove more than the output has");
      }
    }
    return g;
  }

  int64_t group_;
  std::vector<int64_t> kernel_shape_, strides_, dilations_, pads_, output_padding_, output_shape_;
  std::string auto_pad_;
};

}  // namespace

VOLT_REGISTER_KERNEL(conv_transpose, {.op = "ConvTranspose",
                                      .types = kFloatTypes,
                                      .create = make_kernel<ConvTranspose>});

}  // namespace volt
