// Ops that cut, pad or repeat tensors: Slice, Split, Pad, Expand, Tile.
#include <algorithm>

#include "operators/common/convert.hpp"
#include "operators/common/dispatch.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/common/slice_window.hpp"
#include "operators/common/strided_gather.hpp"
#include "operators/common/tensor_values.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

// Reads an optional int input as int64 values; false when the input is given but not known now.
bool optional_ints(const InferContext& ctx, size_t i, std::vector<int64_t>& out, bool& given) {
  given = ctx.has_input(i);
  if (!given) return true;
  const Tensor* t = ctx.input_tensor(i);
  if (!t) return false;
  out = to_int64_vector(*t, ctx.node(), "an index input");
  return true;
}

// Copies a strided window of `in` into `out`: out[i] = in[start + i * step] per axis.
template <class T>
void strided_copy(const Tensor& in, Tensor& out, const std::vector<int64_t>& start,
                  const std::vector<int64_t>& step) {
  const T* src = static_cast<const T*>(in.raw());
  T* dst = static_cast<T*>(out.raw());
  if (out.numel() == 0) return;
  const auto is = strides_of(in.shape());
  std::vector<int64_t> strides(is.size());
  for (size_t d = 0; d < is.size(); ++d) {
    src += start[d] * is[d];
    strides[d] = step[d] * is[d];
  }
  strided_gather(src, dst, out.shape(), std::move(strides));
}

class Slice final : public Kernel {
 public:
  explicit Slice(const Node& n) : params_(n) {}
  void infer(InferContext& ctx) const override {
    const auto w = params_.window(ctx);
    if (!w) return ctx.set_output_unknown(0, ctx.dtype(0));
    ctx.set_output(0, ctx.dtype(0), w->out);
    if (worth_a_view(ctx, w->out)) {
      const std::vector<int64_t> in_strides = strides_of(ctx.shape(0));
      std::vector<int64_t> strides(in_strides.size());
      int64_t offset = 0;
      for (size_t d = 0; d < strides.size(); ++d) {
        offset += w->start[d] * in_strides[d];
        strides[d] = w->step[d] * in_strides[d];
      }
      if (auto view = view_if_one_run(ctx, offset, w->out, std::move(strides), w->out))
        ctx.set_state(std::make_shared<ContiguousView>(std::move(*view)));
    }
  }
  void run(RunContext& ctx) const override {
    if (const auto* view = static_cast<const ContiguousView*>(ctx.state_ptr()))
      return output_contiguous_view(ctx, *view);
    const Tensor& in = ctx.input(0);
    const SliceWindow w = params_.window(ctx);
    Tensor& out = ctx.output(0);
    dispatch_any(in.dtype(), [&](auto tag) {
      strided_copy<typename decltype(tag)::type>(in, out, w.start, w.step);
    });
  }

 private:
  SliceParameters params_;
};

// The gradient of Slice: dy scattered back into zeros shaped like the input. Inputs: dy, the
// input's shape, then Slice's own starts, ends, axes, steps (or its attributes before opset 10).
class SliceGrad final : public Kernel {
 public:
  explicit SliceGrad(const Node& n)
      : starts_(n.attr_ints("starts")),
        ends_(n.attr_ints("ends")),
        axes_(n.attr_ints("axes")),
        legacy_(n.has_attr("starts")) {}
  void infer(InferContext& ctx) const override {
    const Tensor* s = ctx.input_tensor(1);
    if (!s) return ctx.set_output_unknown(0, ctx.dtype(0));
    ctx.set_output(0, ctx.dtype(0), to_int64_vector(*s, ctx.node(), "shape"));
  }
  void run(RunContext& ctx) const override {
    const Shape in = to_int64_vector(ctx.input(1), ctx.node(), "shape");
    std::vector<int64_t> starts = starts_, ends = ends_, axes = axes_, steps;
    if (!legacy_) {
      starts = to_int64_vector(ctx.input(2), ctx.node(), "starts");
      ends = to_int64_vector(ctx.input(3), ctx.node(), "ends");
      if (ctx.has_input(4)) axes = to_int64_vector(ctx.input(4), ctx.node(), "axes");
      if (ctx.has_input(5)) steps = to_int64_vector(ctx.input(5), ctx.node(), "steps");
    }
    const SliceWindow w = slice_window(in, starts, ends, axes, steps, ctx.node());
    const Tensor& dy = ctx.input(0);
    Tensor& dx = ctx.output(0);
    const auto st = strides_of(in);
    dispatch_numeric(dy.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* out = static_cast<T*>(dx.raw());
      std::fill(out, out + dx.numel(), T{});
      const T* g = static_cast<const T*>(dy.raw());
      for (int64_t e = 0; e < dy.numel(); ++e) {
        int64_t rem = e, off = 0;
        for (size_t d = w.out.size(); d-- > 0;) {
          off += (w.start[d] + (rem % w.out[d]) * w.step[d]) * st[d];
          rem /= w.out[d];
        }
        out[off] = g[e];
      }
    });
  }

 private:
  std::vector<int64_t> starts_, ends_, axes_;
  bool legacy_;
};

class Split final : public Kernel {
 public:
  explicit Split(const Node& n)
      : axis_(n.attr_int("axis", 0)),
        from_input_(n.opset >= 13),
        attr_split_(n.attr_ints("split")),
        num_outputs_(n.attr_int("num_outputs", 0)) {}
  void infer(InferContext& ctx) const override {
    std::vector<int64_t> split = attr_split_;
    bool given = false;
    if (from_input_ && !optional_ints(ctx, 1, split, given)) {
      for (size_t i = 0; i < ctx.output_count(); ++i) ctx.set_output_unknown(i, ctx.dtype(0));
      return;
    }
    const auto sizes = resolve(ctx.shape(0), split, ctx.output_count(), ctx.node());
    const int64_t axis =
        normalize_axis(axis_, static_cast<int64_t>(ctx.shape(0).size()), ctx.node());
    for (size_t i = 0; i < sizes.size(); ++i) {
      Shape s = ctx.shape(0);
      s[axis] = sizes[i];
      ctx.set_output(i, ctx.dtype(0), s);
    }
  }
  void run(RunContext& ctx) const override {
    const Tensor& in = ctx.input(0);
    std::vector<int64_t> split = attr_split_;
    if (from_input_ && ctx.has_input(1)) split = to_int64_vector(ctx.input(1), ctx.node(), "split");
    const auto sizes = resolve(in.shape(), split, ctx.output_count(), ctx.node());
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(in.rank()), ctx.node());
    std::vector<int64_t> start(in.rank(), 0), step(in.rank(), 1);
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (ctx.has_output(i)) {
        Tensor& out = ctx.output(i);
        dispatch_any(in.dtype(), [&](auto tag) {
          strided_copy<typename decltype(tag)::type>(in, out, start, step);
        });
      }
      start[axis] += sizes[i];
    }
  }

 private:
  std::vector<int64_t> resolve(const Shape& in, const std::vector<int64_t>& split, size_t outputs,
                               const Node& node) const {
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(in.size()), node);
    const int64_t dim = in[axis];
    if (!split.empty()) {
      int64_t total = 0;
      for (int64_t s : split) total += s;
      VOLT_CHECK(total == dim && split.size() == outputs, InvalidArgument,
                 node.describe() + ": split sizes " + shape_str(split) +
                     " do not cover axis of size " + std::to_string(dim));
      return split;
    }
    const int64_t n = num_outputs_ > 0 ? num_outputs_ : static_cast<int64_t>(outputs);
    const int64_t chunk = (dim + n - 1) / n;  // the last chunk may be smaller (opset 18)
    std::vector<int64_t> sizes;
    for (int64_t i = 0; i < n; ++i)
      sizes.push_back(std::max<int64_t>(0, std::min(chunk, dim - i * chunk)));
    if (num_outputs_ == 0)
      VOLT_CHECK(dim % n == 0, InvalidArgument,
                 node.describe() + ": axis of size " + std::to_string(dim) +
                     " does not split into " + std::to_string(n) + " equal parts");
    return sizes;
  }
  int64_t axis_;
  bool from_input_;
  std::vector<int64_t> attr_split_;
  int64_t num_outputs_;
};

enum class PadMode { Constant, Edge, Wrap, Reflect };

PadMode pad_mode(const Node& n) {
  const std::string mode = n.attr_string("mode", "constant");
  VOLT_CHECK(mode == "constant" || mode == "reflect" || mode == "edge" || mode == "wrap",
             InvalidModel, n.describe() + ": unknown mode '" + mode + "'");
  return mode == "constant" ? PadMode::Constant
         : mode == "edge"   ? PadMode::Edge
         : mode == "wrap"   ? PadMode::Wrap
                            : PadMode::Reflect;
}

// The source index along an axis of `n` elements for padded position `i` (i may fall outside
// [0, n)), or -1 where the pad takes the constant: constant mode, or an empty axis.
int64_t pad_source(PadMode mode, int64_t i, int64_t n) {
  if (i >= 0 && i < n) return i;
  if (mode == PadMode::Constant || n == 0) return -1;
  if (mode == PadMode::Edge) return std::clamp<int64_t>(i, 0, n - 1);
  if (mode == PadMode::Wrap) return ((i % n) + n) % n;
  const int64_t period = std::max<int64_t>(2 * (n - 1), 1);  // reflect
  i = ((i % period) + period) % period;
  return i >= n ? period - i : i;
}

std::vector<int64_t> full_pads(size_t rank, const std::vector<int64_t>& pads,
                               const std::vector<int64_t>& axes, const Node& node) {
  if (axes.empty()) {
    VOLT_CHECK(pads.size() == 2 * rank, InvalidArgument,
               node.describe() + ": pads has " + std::to_string(pads.size()) + " values for rank " +
                   std::to_string(rank));
    return pads;
  }
  VOLT_CHECK(pads.size() == 2 * axes.size(), InvalidArgument,
             node.describe() + ": pads must have two values per axis");
  std::vector<int64_t> full(2 * rank, 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t a = normalize_axis(axes[i], static_cast<int64_t>(rank), node);
    full[a] = pads[i];
    full[a + rank] = pads[i + axes.size()];
  }
  return full;
}

// A run's pads, begins then ends for every axis: the attribute's (opset < 11), or the pads
// input at `first` with the optional axes input two after it.
std::vector<int64_t> run_pads(const RunContext& ctx, bool legacy, const std::vector<int64_t>& attr,
                              size_t first, size_t rank) {
  if (legacy) return full_pads(rank, attr, {}, ctx.node());
  std::vector<int64_t> axes;
  if (ctx.has_input(first + 2)) axes = to_int64_vector(ctx.input(first + 2), ctx.node(), "axes");
  return full_pads(rank, to_int64_vector(ctx.input(first), ctx.node(), "pads"), axes, ctx.node());
}

class Pad final : public Kernel {
 public:
  explicit Pad(const Node& n) : legacy_(n.opset < 11) {
    if (legacy_) {
      pads_ = n.attr_ints(n.opset < 2 ? "paddings" : "pads");
      value_ = n.attr_float("value", 0);
    }
    mode_ = pad_mode(n);
  }
  void infer(InferContext& ctx) const override {
    std::vector<int64_t> pads = pads_, axes;
    bool given;
    if (!legacy_ && (!optional_ints(ctx, 1, pads, given) || !optional_ints(ctx, 3, axes, given)))
      return ctx.set_output_unknown(0, ctx.dtype(0));
    ctx.set_output(0, ctx.dtype(0),
                   out_shape(ctx.shape(0), full_pads(ctx.shape(0).size(), pads, axes, ctx.node()),
                             ctx.node()));
  }
  void run(RunContext& ctx) const override {
    const Tensor& in = ctx.input(0);
    const std::vector<int64_t> pads = run_pads(ctx, legacy_, pads_, 1, in.rank());
    Tensor& out = ctx.output(0);
    const size_t r = in.rank();
    const auto is = strides_of(in.shape());
    dispatch_any(in.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T fill{};
      if constexpr (!std::is_same_v<T, std::string>) {
        if (legacy_)
          fill = convert<float, T>(value_);
        else if (ctx.has_input(2) && ctx.input(2).numel() > 0)
          fill = static_cast<const T*>(ctx.input(2).raw())[0];
      }
      const T* src = static_cast<const T*>(in.raw());
      T* dst = static_cast<T*>(out.raw());
      const Shape& os = out.shape();
      if (out.numel() == 0) return;
      if (r == 0) {
        dst[0] = src[0];
        return;
      }
      // Row by row (the last axis): the outer axes map to one source row, or none (a constant
      // pad); the row's middle is one contiguous copy, its pads filled or mapped per element.
      const int64_t cols = os[r - 1], n_last = in.dim(r - 1), before = pads[r - 1];
      const int64_t rows = out.numel() / cols;
      std::vector<int64_t> idx(r, 0);  // the output row's index over the outer axes
      for (int64_t row = 0; row < rows; ++row) {
        T* out_row = dst + row * cols;
        int64_t off = 0;
        bool inside = true;
        for (size_t d = 0; d + 1 < r && inside; ++d) {
          const int64_t i = source_index(idx[d] - pads[d], in.dim(d));
          if (i < 0)
            inside = false;
          else
            off += i * is[d];
        }
        if (!inside) {
          std::fill(out_row, out_row + cols, fill);
        } else {
          const T* in_row = src + off;
          const int64_t lo = std::clamp<int64_t>(before, 0, cols),
                        hi = std::clamp<int64_t>(before + n_last, lo, cols);
          for (int64_t j = 0; j < lo; ++j) {
            const int64_t i = source_index(j - before, n_last);
            out_row[j] = i < 0 ? fill : in_row[i];
          }
          if (hi > lo) std::copy(in_row + (lo - before), in_row + (hi - before), out_row + lo);
          for (int64_t j = hi; j < cols; ++j) {
            const int64_t i = source_index(j - before, n_last);
            out_row[j] = i < 0 ? fill : in_row[i];
          }
        }
        for (size_t d = r - 1; d-- > 0;) {  // the next row
          if (++idx[d] < os[d]) break;
          idx[d] = 0;
        }
      }
    });
  }

  int64_t source_index(int64_t i, int64_t n) const { return pad_source(mode_, i, n); }

 private:
  static Shape out_shape(const Shape& in, const std::vector<int64_t>& pads, const Node& node) {
    Shape out = in;
    for (size_t d = 0; d < in.size(); ++d) {
      out[d] += pads[d] + pads[d + in.size()];
      VOLT_CHECK(out[d] >= 0, InvalidArgument,
                 node.describe() + ": negative pads remove more than the input has");
    }
    return out;
  }
  bool legacy_;
  PadMode mode_;
  std::vector<int64_t> pads_;
  float value_ = 0;
};

// Pad's gradient for every mode: inputs dY, X, then Pad's pads, constant_value, axes (or its
// pads attribute, `legacy`). Each output element adds its gradient to the input element it was
// read from, by the same mapping as Pad (a reflected or repeated element gathers several).
class PadGrad final : public Kernel {
 public:
  explicit PadGrad(const Node& n)
      : legacy_(n.attr_int("legacy", 0) != 0),
        mode_(pad_mode(n)),
        pads_(legacy_ ? n.attr_ints("pads") : std::vector<int64_t>{}) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.dtype(1), ctx.shape(1)); }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(1);
    const size_t r = x.rank();
    const std::vector<int64_t> pads = run_pads(ctx, legacy_, pads_, 2, r);
    const Shape& os = ctx.input(0).shape();
    VOLT_CHECK(os.size() == r, InvalidArgument, ctx.node().describe() + ": dY's rank is not X's");
    const auto dy = to_doubles(ctx.input(0));
    std::vector<double> dx(static_cast<size_t>(x.numel()), 0.0);
    const auto is = strides_of(x.shape());
    std::vector<int64_t> idx(r, 0);
    for (size_t o = 0; o < dy.size(); ++o) {
      int64_t src = 0;
      bool inside = true;
      for (size_t d = 0; d < r && inside; ++d) {
        const int64_t i = pad_source(mode_, idx[d] - pads[d], x.dim(d));
        inside = i >= 0;
        src += i * is[d];
      }
      if (inside) dx[static_cast<size_t>(src)] += dy[o];
      for (size_t d = r; d-- > 0;) {
        if (++idx[d] < os[d]) break;
        idx[d] = 0;
      }
    }
    from_doubles(ctx.output(0), dx);
  }

 private:
  bool legacy_;
  PadMode mode_;
  std::vector<int64_t> pads_;
};

// Expand and Tile: output element i reads input element (i mapped back per axis).
class Expand final : public Kernel {
 public:
  explicit Expand(const Node&) {}
  void infer(InferContext& ctx) const override {
    const Tensor* s = ctx.input_tensor(1);
    if (!s) return ctx.set_output_unknown(0, ctx.dtype(0));
    ctx.set_output(
        0, ctx.dtype(0),
        broadcast_shapes({ctx.shape(0), to_int64_vector(*s, ctx.node(), "shape")}, ctx.node()));
  }
  void run(RunContext& ctx) const override {
    const Tensor& in = ctx.input(0);
    Tensor& out = ctx.output(0);
    const auto st = broadcast_strides(in.shape(), out.shape());
    dispatch_any(in.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = static_cast<const T*>(in.raw());
      T* dst = static_cast<T*>(out.raw());
      // By rows in parallel: a row either copies (stride 1) or repeats one value (stride 0).
      BroadcastIterator(out.shape(), {st})
          .for_each_row_parallel(
              [&](const int64_t* off, int64_t n, const int64_t* step, int64_t first) {
                const T* from = src + off[0];
                T* to = dst + first;
                if (step[0] == 1)
                  std::copy_n(from, n, to);
                else
                  std::fill_n(to, n, *from);
              });
    });
  }
};

class Tile final : public Kernel {
 public:
  explicit Tile(const Node&) {}
  void infer(InferContext& ctx) const override {
    const Tensor* r = ctx.input_tensor(1);
    if (!r) return ctx.set_output_unknown(0, ctx.dtype(0));
    ctx.set_output(0, ctx.dtype(0),
                   tiled(ctx.shape(0), to_int64_vector(*r, ctx.node(), "repeats"), ctx.node()));
  }
  void run(RunContext& ctx) const override {
    const Tensor& in = ctx.input(0);
    Tensor& out = ctx.output(0);
    const size_t r = in.rank();
    const auto is = strides_of(in.shape());
    if (out.numel() == 0) return;
    // Row by row of the output: each is the input's last-axis row (found from the outer
    // coordinates) repeated; the index arithmetic is per row, not per element. A scalar is one
    // row of one.
    const int64_t row = r ? in.dim(r - 1) : 1, out_row = r ? out.dim(r - 1) : 1,
                  rows = out.numel() / out_row;
    dispatch_any(in.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = static_cast<const T*>(in.raw());
      T* dst = static_cast<T*>(out.raw());
      for (int64_t o = 0; o < rows; ++o) {
        int64_t rem = o, off = 0;
        for (size_t d = r ? r - 1 : 0; d-- > 0;) {
          off += ((rem % out.dim(d)) % in.dim(d)) * is[d];
          rem /= out.dim(d);
        }
        T* to = dst + o * out_row;
        for (int64_t k = 0; k < out_row; k += row) std::copy(src + off, src + off + row, to + k);
      }
    });
  }

 private:
  static Shape tiled(const Shape& in, const std::vector<int64_t>& repeats, const Node& node) {
    VOLT_CHECK(repeats.size() == in.size(), InvalidArgument,
               node.describe() + ": repeats must have one value per axis");
    Shape out = in;
    for (size_t i = 0; i < in.size(); ++i) {
      VOLT_CHECK(repeats[i] >= 0, InvalidArgument, node.describe() + ": repeats must be >= 0");
      VOLT_CHECK(!__builtin_mul_overflow(in[i], repeats[i], &out[i]), InvalidArgument,
                 node.describe() + ": axis " + std::to_string(i) + " of size " +
                     std::to_string(in[i]) + " repeated " + std::to_string(repeats[i]) +
                     " times overflows int64");
    }
    return out;
  }
};

}  // namespace

VOLT_REGISTER_KERNEL(slice, {.op = "Slice", .create = make_kernel<Slice>});
VOLT_REGISTER_KERNEL(slice_grad, volt_kernel("SliceGrad", make_kernel<SliceGrad>));
VOLT_REGISTER_KERNEL(split, {.op = "Split", .create = make_kernel<Split>});
VOLT_REGISTER_KERNEL(pad, {.op = "Pad", .create = make_kernel<Pad>});
VOLT_REGISTER_KERNEL(pad_grad, volt_kernel("PadGrad", make_kernel<PadGrad>));
VOLT_REGISTER_KERNEL(expand, {.op = "Expand", .since = 8, .create = make_kernel<Expand>});
VOLT_REGISTER_KERNEL(tile, {.op = "Tile", .since = 6, .create = make_kernel<Tile>});

}  // namespace volt
