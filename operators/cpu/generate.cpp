// Ops that build or rearrange tensors: Range, ConstantOfShape, EyeLike, Trilu, Where, CumSum,
// DepthToSpace, SpaceToDepth, ReverseSequence.
#include <cmath>

#include "operators/common/dispatch.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/common/strided_gather.hpp"
#include "operators/common/tensor_values.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

class Range final : public Kernel {
 public:
  explicit Range(const Node&) {}
  void infer(InferContext& ctx) const override {
    const Tensor *s = ctx.input_tensor(0), *l = ctx.input_tensor(1), *d = ctx.input_tensor(2);
    if (!s || !l || !d) return ctx.set_output_unknown(0, ctx.dtype(0));
    ctx.set_output(0, ctx.dtype(0), {count(*s, *l, *d, ctx.node())});
  }
  void run(RunContext& ctx) const override {
    const Tensor &s = ctx.input(0), &l = ctx.input(1), &d = ctx.input(2);
    const int64_t n = count(s, l, d, ctx.node());
    Tensor& out = ctx.output(0);
    dispatch_numeric(out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = typename Compute<T>::type;
      const C start = static_cast<C>(static_cast<const T*>(s.raw())[0]),
              delta = static_cast<C>(static_cast<const T*>(d.raw())[0]);
      T* p = static_cast<T*>(out.raw());
      for (int64_t i = 0; i < n; ++i)
        p[i] = static_cast<T>(static_cast<C>(start + static_cast<C>(i) * delta));
    });
  }

 private:
  static int64_t count(const Tensor& s, const Tensor& l, const Tensor& d, const Node& node) {
    const double delta = scalar_value(d);
    VOLT_CHECK(delta != 0, InvalidArgument, node.describe() + ": delta cannot be 0");
    const double n = std::ceil((scalar_value(l) - scalar_value(s)) / delta);
    VOLT_CHECK(n < 1e12, InvalidArgument, node.describe() + ": the range has too many elements");
    return std::max<int64_t>(0, static_cast<int64_t>(n));
  }
};

class ConstantOfShape final : public Kernel {
 public:
  explicit ConstantOfShape(const Node& n) {
    value_ = n.has_attr("value") ? n.attr_tensor("value") : Tensor::scalar(0.0f);
    VOLT_CHECK(value_.numel() == 1, InvalidModel, n.describe() + ": value must have one element");
  }
  void infer(InferContext& ctx) const override {
    const Tensor* s = ctx.input_tensor(0);
    if (!s) return ctx.set_output_unknown(0, value_.dtype());
    ctx.set_output(0, value_.dtype(), to_int64_vector(*s, ctx.node(), "shape"));
  }
  void run(RunContext& ctx) const override {
    Tensor& out = ctx.output(0);
    dispatch_any(out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      std::fill(static_cast<T*>(out.raw()), static_cast<T*>(out.raw()) + out.numel(),
                value_.data<T>()[0]);
    });
  }

 private:
  Tensor value_;
};

class EyeLike final : public Kernel {
 public:
  explicit EyeLike(const Node& n) : k_(n.attr_int("k", 0)), dtype_(n.attr_int("dtype", 0)) {}
  void infer(InferContext& ctx) const override {
    VOLT_CHECK(ctx.shape(0).size() == 2, InvalidArgument,
               ctx.node().describe() + ": input must be 2-D");
    ctx.set_output(0, dtype_ ? static_cast<DType>(dtype_) : ctx.dtype(0), ctx.shape(0));
  }
  void run(RunContext& ctx) const override {
    Tensor& out = ctx.output(0);
    dispatch_numeric(out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = typename Compute<T>::type;
      T* p = static_cast<T*>(out.raw());
      const int64_t r = out.dim(0), c = out.dim(1);
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < c; ++j)
          p[i * c + j] = static_cast<T>(static_cast<C>(j - i == k_ ? 1 : 0));
    });
  }

 private:
  int64_t k_, dtype_;
};

class Trilu final : public Kernel {
 public:
  explicit Trilu(const Node& n) : upper_(n.attr_int("upper", 1) != 0) {}
  void infer(InferContext& ctx) const override {
    VOLT_CHECK(ctx.shape(0).size() >= 2, InvalidArgument,
               ctx.node().describe() + ": input must have rank >= 2");
    ctx.set_output(0, ctx.dtype(0), ctx.shape(0));
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const int64_t k = ctx.has_input(1) ? to_int64_vector(ctx.input(1), ctx.node(), "k")[0] : 0;
    const int64_t r = x.dim(x.rank() - 2), c = x.dim(x.rank() - 1),
                  mats = (r * c) != 0 ? x.numel() / (r * c) : 0;
    dispatch_any(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = static_cast<const T*>(x.raw());
      T* dst = static_cast<T*>(ctx.output(0).raw());
      for (int64_t m = 0; m < mats; ++m)
        for (int64_t i = 0; i < r; ++i)
          for (int64_t j = 0; j < c; ++j) {
            const int64_t e = (m * r + i) * c + j;
            const bool keep = upper_ ? j - i >= k : j - i <= k;
            dst[e] = keep ? src[e] : T{};
          }
    });
  }

 private:
  bool upper_;
};

class Where final : public Kernel {
 public:
  explicit Where(const Node&) {}
  void infer(InferContext& ctx) const override {
    ctx.set_output(0, ctx.dtype(1),
                   broadcast_shapes({ctx.shape(0), ctx.shape(1), ctx.shape(2)}, ctx.node()));
  }
  void run(RunContext& ctx) const override {
    const Tensor &c = ctx.input(0), &a = ctx.input(1), &b = ctx.input(2);
    Tensor& out = ctx.output(0);
    const bool* pc = c.data<bool>();
    dispatch_any(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* pa = static_cast<const T*>(a.raw());
      const T* pb = static_cast<const T*>(b.raw());
      T* po = static_cast<T*>(out.raw());
      // By rows, in parallel; the rows with every operand contiguous (or one repeated, an
      // attention mask's fill value) in loops the compiler vectorizes.
      BroadcastIterator(out.shape(), {broadcast_strides(c.shape(), out.shape()),
                                      broadcast_strides(a.shape(), out.shape()),
                                      broadcast_strides(b.shape(), out.shape())})
          .for_each_row_parallel(
              [&](const int64_t* off, int64_t n, const int64_t* step, int64_t first) {
                // (Both sides read before the choice: a select the compiler vectorizes.)
                const auto* rc = reinterpret_cast<const unsigned char*>(pc + off[0]);
                const T *ra = pa + off[1], *rb = pb + off[2];
                T* o = po + first;
                auto pick = [&](int64_t i, int64_t ic, int64_t ia, int64_t ib) {
                  const T x = ra[ia], y = rb[ib];
                  o[i] = rc[ic] ? x : y;
                };
                if (step[0] == 1 && step[1] == 1 && step[2] == 1)
                  for (int64_t i = 0; i < n; ++i) pick(i, i, i, i);
                else if (step[0] == 1 && step[1] == 1 && step[2] == 0)
                  for (int64_t i = 0; i < n; ++i) pick(i, i, i, 0);
                else if (step[0] == 1 && step[1] == 0 && step[2] == 1)
                  for (int64_t i = 0; i < n; ++i) pick(i, i, 0, i);
                else
                  for (int64_t i = 0; i < n; ++i) pick(i, i * step[0], i * step[1], i * step[2]);
              });
    });
  }
};

class CumSum final : public Kernel {
 public:
  explicit CumSum(const Node& n)
      : exclusive_(n.attr_int("exclusive", 0) != 0), reverse_(n.attr_int("reverse", 0) != 0) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.dtype(0), ctx.shape(0)); }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const int64_t axis = normalize_axis(to_int64_vector(ctx.input(1), ctx.node(), "axis")[0],
                                        static_cast<int64_t>(x.rank()), ctx.node());
    const int64_t n = x.dim(axis);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= x.dim(d);
    for (size_t d = static_cast<size_t>(axis) + 1; d < x.rank(); ++d) inner *= x.dim(d);
    dispatch_numeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = typename Compute<T>::type;
      const T* px = static_cast<const T*>(x.raw());
      T* py = static_cast<T*>(ctx.output(0).raw());
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          C acc = 0;
          for (int64_t s = 0; s < n; ++s) {
            const int64_t j = reverse_ ? n - 1 - s : s;
            const int64_t e = (o * n + j) * inner + i;
            const C v = static_cast<C>(px[e]);
            if (!exclusive_) acc += v;
            py[e] = static_cast<T>(acc);
            if (exclusive_) acc += v;
          }
        }
    });
  }

 private:
  bool exclusive_, reverse_;
};

// DepthToSpace (DCR or CRD) and SpaceToDepth as one 6-D transpose.
class SpaceDepth final : public Kernel {
 public:
  SpaceDepth(const Node& n, bool to_space)
      : to_space_(to_space),
        block_(n.attr_int("blocksize")),
        crd_(n.attr_string("mode", "DCR") == "CRD") {
    VOLT_CHECK(block_ >= 1, InvalidModel, n.describe() + ": blocksize must be >= 1");
  }
  void infer(InferContext& ctx) const override {
    const Shape& s = ctx.shape(0);
    VOLT_CHECK(s.size() == 4, InvalidArgument, ctx.node().describe() + ": input must be 4-D");
    const int64_t b = block_;
    if (to_space_) {
      VOLT_CHECK(s[1] % (b * b) == 0, InvalidArgument,
                 ctx.node().describe() + ": channels must divide by blocksize^2");
      ctx.set_output(0, ctx.dtype(0), {s[0], s[1] / (b * b), s[2] * b, s[3] * b});
    } else {
      VOLT_CHECK(s[2] % b == 0 && s[3] % b == 0, InvalidArgument,
                 ctx.node().describe() + ": height and width must divide by blocksize");
      ctx.set_output(0, ctx.dtype(0), {s[0], s[1] * b * b, s[2] / b, s[3] / b});
    }
  }
  // The output's axes as a 6-D view of X, copied by strided_gather (the one copy loop: rows,
  // pieces in parallel, few strided channels interleaved).
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3), b = block_;
    const int64_t plane = h * w;
    std::vector<int64_t> shape, strides;
    if (to_space_) {
      // y[n, ch, i * b + bi, j * b + bj] = x[n, channel(ch, bi, bj), i, j]
      const int64_t oc = c / (b * b);
      const int64_t s_ch = crd_ ? b * b * plane : plane, s_bi = crd_ ? b * plane : b * oc * plane,
                    s_bj = crd_ ? plane : oc * plane;
      shape = {n, oc, h, b, w, b};
      strides = {c * plane, s_ch, w, s_bi, 1, s_bj};
    } else {
      // y[n, (bi * b + bj) * c + ch, oi, oj] = x[n, ch, oi * b + bi, oj * b + bj]
      shape = {n, b, b, c, h / b, w / b};
      strides = {c * plane, w, 1, plane, b * w, b};
    }
    Tensor& y = ctx.output(0);
    dispatch_any(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      strided_gather(static_cast<const T*>(x.raw()), static_cast<T*>(y.raw()), shape, strides);
    });
  }

 private:
  bool to_space_;
  int64_t block_;
  bool crd_;
};

class ReverseSequence final : public Kernel {
 public:
  explicit ReverseSequence(const Node& n)
      : batch_axis_(n.attr_int("batch_axis", 1)), time_axis_(n.attr_int("time_axis", 0)) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.dtype(0), ctx.shape(0)); }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const auto lens = to_int64_vector(ctx.input(1), ctx.node(), "sequence_lens");
    const int64_t ba = normalize_axis(batch_axis_, static_cast<int64_t>(x.rank()), ctx.node());
    const int64_t ta = normalize_axis(time_axis_, static_cast<int64_t>(x.rank()), ctx.node());
    VOLT_CHECK(x.rank() >= 2 && ba + ta == 1, InvalidArgument,
               ctx.node().describe() + ": batch_axis and time_axis must be 0 and 1 (or 1 and 0)");
    VOLT_CHECK(static_cast<int64_t>(lens.size()) == x.dim(ba), InvalidArgument,
               ctx.node().describe() + ": sequence_lens must have one length per batch entry (" +
                   std::to_string(x.dim(ba)) + "), got " + std::to_string(lens.size()));
    // Rows of the two leading axes, each a contiguous block of the trailing ones: a row at time
    // t < len of its batch entry comes from time len - 1 - t, the others stay.
    const int64_t d0 = x.dim(0), d1 = x.dim(1), inner = x.numel() / std::max<int64_t>(d0 * d1, 1);
    dispatch_any(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = static_cast<const T*>(x.raw());
      T* dst = static_cast<T*>(ctx.output(0).raw());
      parallel_for(d0 * d1, d0 * d1 > 1 && x.numel() > 32768, [&](int64_t row) {
        const int64_t i0 = row / d1, i1 = row % d1;
        const int64_t b = ba == 0 ? i0 : i1, t = ta == 0 ? i0 : i1;
        const int64_t len = std::clamp<int64_t>(lens[static_cast<size_t>(b)], 0, x.dim(ta));
        const int64_t from_t = t < len ? len - 1 - t : t;
        const int64_t from = ta == 0 ? from_t * d1 + i1 : i0 * d1 + from_t;
        std::copy_n(src + from * inner, inner, dst + row * inner);
      });
    });
  }

 private:
  int64_t batch_axis_, time_axis_;
};

}  // namespace

VOLT_REGISTER_KERNEL(range, {.op = "Range", .since = 11, .create = make_kernel<Range>});
VOLT_REGISTER_KERNEL(constant_of_shape,
                     {.op = "ConstantOfShape", .since = 9, .create = make_kernel<ConstantOfShape>});
VOLT_REGISTER_KERNEL(eye_like, {.op = "EyeLike", .since = 9, .create = make_kernel<EyeLike>});
VOLT_REGISTER_KERNEL(trilu, {.op = "Trilu", .since = 14, .create = make_kernel<Trilu>});
VOLT_REGISTER_KERNEL(where, {.op = "Where", .since = 9, .create = make_kernel<Where>});
VOLT_REGISTER_KERNEL(cum_sum, {.op = "CumSum", .since = 11, .create = make_kernel<CumSum>});
VOLT_REGISTER_KERNEL(depth_to_space, {.op = "DepthToSpace", .create = [](const Node& n) {
                                        return std::make_unique<SpaceDepth>(n, true);
                                      }});
VOLT_REGISTER_KERNEL(space_to_depth, {.op = "SpaceToDepth", .create = [](const Node& n) {
                                        return std::make_unique<SpaceDepth>(n, false);
                                      }});
VOLT_REGISTER_KERNEL(reverse_sequence, {.op = "ReverseSequence",
                                        .since = 10,
                                        .create = make_kernel<ReverseSequence>});

}  // namespace volt
