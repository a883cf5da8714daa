// ConvTranspose: the gradient of Conv with respect to its input, as a reference scatter loop
// over every float type (N-d, groups, dilations, output_padding, output_shape, auto_pad).
#include "operators/common/dispatch.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/cpu/conv_transpose_geometry.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

class ConvTranspose final : public Kernel {
 public:
  explicit ConvTranspose(const Node& n) : attrs_(n) {}

  void infer(InferContext& ctx) const override {
    const DeconvGeometry g = attrs_.resolve(ctx.shape(0), ctx.shape(1), ctx.node());
    Shape out{g.n, g.m};
    out.insert(out.end(), g.out.begin(), g.out.end());
    if (ctx.has_input(2))
      VOLT_CHECK(numel_of(ctx.shape(2)) == g.m, InvalidArgument,
                 ctx.node().describe() + ": bias must have " + std::to_string(g.m) + " values");
    ctx.set_output(0, ctx.dtype(0), out);
  }

  void run(RunContext& ctx) const override {
    const Tensor &x = ctx.input(0), &w = ctx.input(1);
    const DeconvGeometry g = attrs_.resolve(x.shape(), w.shape(), ctx.node());
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
  ConvTransposeAttributes attrs_;
};

}  // namespace

VOLT_REGISTER_KERNEL(conv_transpose, {.op = "ConvTranspose",
                                      .types = kFloatTypes,
                                      .create = make_kernel<ConvTranspose>});

}  // namespace volt
