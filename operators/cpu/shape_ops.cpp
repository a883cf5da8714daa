// Reference kernels that reshape or move data: Identity, Reshape, Flatten, Squeeze, Unsqueeze
// (views of their input), Shape, Size, Constant, Transpose, Concat, Gather.
#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include "operators/common/axes_input.hpp"
#include "operators/common/dispatch.hpp"
#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/layout.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/shape_formula.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/common/slice_window.hpp"
#include "operators/registry.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

// --- views ---------------------------------------------------------------------------------------
// Kernels whose output is input 0 with another shape. infer() computes the shape; run() makes
// the view (a copy only for strings, which cannot live in the arena anyway).
class ViewKernel : public Kernel {
 public:
  void run(RunContext& ctx) const override {
    const Value& in = ctx.input_value(0);
    if (!in.is_tensor()) {  // Identity of a sequence or optional
      ctx.set_output(0, in);
      return;
    }
    ctx.set_output(0, in.tensor().reshaped(out_shape(ctx)));
  }

 protected:
  virtual Shape out_shape(RunContext& ctx) const = 0;
};

class Identity final : public ViewKernel {
 public:
  explicit Identity(const Node&) {}
  void infer(InferContext& ctx) const override {
    if (ctx.input(0).kind != ValueInfo::Kind::Tensor) return ctx.set_output(0, ctx.input(0));
    ctx.set_output(0, ctx.dtype(0), ctx.shape(0));
  }
  Shape out_shape(RunContext& ctx) const override { return ctx.input(0).shape(); }
};

class Reshape final : public ViewKernel {
 public:
  explicit Reshape(const Node& n) : allowzero_(n.attr_int("allowzero", 0) != 0) {
    if (n.opset < 5) attr_shape_ = n.attr_ints("shape");
    legacy_ = n.opset < 5;
  }
  void infer(InferContext& ctx) const override {
    std::vector<int64_t> target;
    if (legacy_) {
      target = attr_shape_;
    } else {
      const Tensor* t = ctx.input_tensor(1);
      if (!t) return ctx.set_output_unknown(0, ctx.dtype(0));
      target = to_int64_vector(*t, ctx.node(), "the shape input");
    }
    ctx.set_output(0, ctx.dtype(0), resolve(ctx.shape(0), target, ctx.node()));
  }
  Shape out_shape(RunContext& ctx) const override {
    std::vector<int64_t> target =
        legacy_ ? attr_shape_ : to_int64_vector(ctx.input(1), ctx.node(), "the shape input");
    return resolve(ctx.input(0).shape(), target, ctx.node());
  }

 private:
  Shape resolve(const Shape& in, const std::vector<int64_t>& target, const Node& node) const {
    return resolve_reshape(in, target, allowzero_, node);
  }
  bool allowzero_;
  bool legacy_;
  std::vector<int64_t> attr_shape_;
};

class Flatten final : public ViewKernel {
 public:
  explicit Flatten(const Node& n) : axis_(n.attr_int("axis", 1)) {}
  void infer(InferContext& ctx) const override {
    ctx.set_output(0, ctx.dtype(0), flat(ctx.shape(0), ctx.node()));
  }
  Shape out_shape(RunContext& ctx) const override { return flat(ctx.input(0).shape(), ctx.node()); }

 private:
  Shape flat(const Shape& in, const Node& node) const {
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(in.size()), node, true);
    int64_t a = 1, b = 1;
    for (int64_t i = 0; i < static_cast<int64_t>(in.size()); ++i) (i < axis ? a : b) *= in[i];
    return {a, b};
  }
  int64_t axis_;
};

// Squeeze and Unsqueeze take axes from an attribute before opset 13 and from input 1 after.
class Squeeze final : public ViewKernel {
 public:
  explicit Squeeze(const Node& n) : axes_(n, 13), has_attr_(n.has_attr("axes")) {}
  void infer(InferContext& ctx) const override {
    std::vector<int64_t> axes;
    if (!axes_.read(ctx.has_input(1) ? ctx.input_tensor(1) : nullptr, ctx.has_input(1), ctx.node(),
                    axes))
      return ctx.set_output_unknown(0, ctx.dtype(0));
    ctx.set_output(0, ctx.dtype(0), squeeze(ctx.shape(0), axes, ctx.node()));
  }
  Shape out_shape(RunContext& ctx) const override {
    std::vector<int64_t> axes;
    axes_.read(ctx.has_input(1) ? &ctx.input(1) : nullptr, ctx.has_input(1), ctx.node(), axes);
    return squeeze(ctx.input(0).shape(), axes, ctx.node());
  }

 private:
  Shape squeeze(const Shape& in, std::vector<int64_t> axes, const Node& node) const {
    const int64_t rank = static_cast<int64_t>(in.size());
    std::vector<char> drop(in.size(), 0);
    if (axes.empty() && !(has_attr_ && !axes_.from_input)) {
      for (size_t i = 0; i < in.size(); ++i) drop[i] = in[i] == 1;
    }
    for (int64_t a : axes) {
      const int64_t ax = normalize_axis(a, rank, node);
      VOLT_CHECK(in[ax] == 1, InvalidArgument,
                 node.describe() + ": cannot squeeze axis " + std::to_string(a) + " of shape " +
                     shape_str(in));
      drop[ax] = 1;
    }
    Shape out;
    for (size_t i = 0; i < in.size(); ++i)
      if (!drop[i]) out.push_back(in[i]);
    return out;
  }
  AxesInput axes_;
  bool has_attr_;
};

class Unsqueeze final : public ViewKernel {
 public:
  explicit Unsqueeze(const Node& n) : from_input_(n.opset >= 13), attr_axes_(n.attr_ints("axes")) {}
  void infer(InferContext& ctx) const override {
    if (from_input_ && !ctx.input_tensor(1)) return ctx.set_output_unknown(0, ctx.dtype(0));
    const auto axes =
        from_input_ ? to_int64_vector(*ctx.input_tensor(1), ctx.node(), "axes") : attr_axes_;
    ctx.set_output(0, ctx.dtype(0), unsqueeze(ctx.shape(0), axes, ctx.node()));
  }
  Shape out_shape(RunContext& ctx) const override {
    const auto axes = from_input_ ? to_int64_vector(ctx.input(1), ctx.node(), "axes") : attr_axes_;
    return unsqueeze(ctx.input(0).shape(), axes, ctx.node());
  }

 private:
  static Shape unsqueeze(const Shape& in, const std::vector<int64_t>& axes, const Node& node) {
    const int64_t rank = static_cast<int64_t>(in.size() + axes.size());
    std::vector<char> insert(static_cast<size_t>(rank), 0);
    for (int64_t a : axes) {
      const int64_t ax = normalize_axis(a, rank, node);
      VOLT_CHECK(!insert[ax], InvalidModel,
                 node.describe() + ": axis " + std::to_string(a) + " is given twice");
      insert[ax] = 1;
    }
    Shape out;
    size_t j = 0;
    for (int64_t i = 0; i < rank; ++i) out.push_back(insert[i] ? 1 : in[j++]);
    return out;
  }
  bool from_input_;
  std::vector<int64_t> attr_axes_;
};

// --- shape-only ---------------------------------------------------------------------------------
class ShapeOp final : public Kernel {
 public:
  explicit ShapeOp(const Node& n)
      : start_(n.attr_int("start", 0)), end_(n.attr_int("end", INT64_MAX)) {}
  void infer(InferContext& ctx) const override { ctx.set_output_value(0, compute(ctx.shape(0))); }
  void run(RunContext& ctx) const override {
    const Tensor t = compute(ctx.input(0).shape());
    std::memcpy(ctx.output(0).raw(), t.raw(), t.nbytes());
  }

 private:
  Tensor compute(const Shape& s) const {
    const int64_t r = static_cast<int64_t>(s.size());
    auto clamp = [r](int64_t a) { return std::clamp<int64_t>(a < 0 ? a + r : a, 0, r); };
    const int64_t b = clamp(start_), e = clamp(end_);
    std::vector<int64_t> v(s.begin() + b, s.begin() + std::max(b, e));
    return Tensor::from(v, {static_cast<int64_t>(v.size())});
  }
  int64_t start_, end_;
};

class SizeOp final : public Kernel {
 public:
  explicit SizeOp(const Node&) {}
  void infer(InferContext& ctx) const override {
    ctx.set_output_value(0, Tensor::scalar<int64_t>(numel_of(ctx.shape(0))));
  }
  void run(RunContext& ctx) const override {
    ctx.output(0).data<int64_t>()[0] = ctx.input(0).numel();
  }
};

// volt.ShapeFormula (operators/common/shape_formula.hpp): computed from its inputs' shapes, like
// Shape, at plan time wherever they are known then.
class ShapeFormulaOp final : public Kernel {
 public:
  explicit ShapeFormulaOp(const Node& n)
      : elements_(decode_shape_formula(n.attr_ints("formula"), n.inputs.size(), n.describe())),
        dtype_(static_cast<DType>(n.attr_int("to"))),
        scalar_(n.attr_int("scalar", 0) != 0) {
    VOLT_CHECK(dtype_ == DType::Int64 || dtype_ == DType::Int32, InvalidModel,
               n.describe() + ": 'to' must be int64 or int32");
    VOLT_CHECK(!scalar_ || elements_.size() == 1, InvalidModel,
               n.describe() + ": a scalar formula has one element");
  }
  void infer(InferContext& ctx) const override {
    std::vector<const Shape*> shapes(ctx.input_count(), nullptr);
    for (size_t i = 0; i < shapes.size(); ++i)
      if (ctx.has_input(i)) shapes[i] = &ctx.shape(i);
    ctx.set_output_value(0, compute(shapes, ctx.node()));
  }
  void run(RunContext& ctx) const override {
    std::vector<const Shape*> shapes(ctx.input_count(), nullptr);
    for (size_t i = 0; i < shapes.size(); ++i)
      if (ctx.has_input(i) && ctx.input_value(i).is_tensor())
        shapes[i] = &ctx.input_value(i).tensor().shape();
    const Tensor t = compute(shapes, ctx.node());
    std::memcpy(ctx.output(0).raw(), t.raw(), t.nbytes());
  }

 private:
  Tensor compute(std::span<const Shape* const> shapes, const Node& node) const {
    const std::vector<int64_t> v = evaluate_shape_formula(elements_, shapes, node.describe());
    const Shape shape = scalar_ ? Shape{} : Shape{static_cast<int64_t>(v.size())};
    if (dtype_ == DType::Int64) return Tensor::from(v, shape);
    std::vector<int32_t> narrow(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      VOLT_CHECK(v[i] >= INT32_MIN && v[i] <= INT32_MAX, InvalidArgument,
                 node.describe() + ": " + std::to_string(v[i]) + " does not fit int32");
      narrow[i] = static_cast<int32_t>(v[i]);
    }
    return Tensor::from(narrow, shape);
  }
  std::vector<FormulaElement> elements_;
  DType dtype_;
  bool scalar_;
};

class Constant final : public Kernel {
 public:
  explicit Constant(const Node& n) : value_(constant_node_value(n)) {}
  void infer(InferContext& ctx) const override { ctx.set_output_value(0, value_); }
  void run(RunContext& ctx) const override { ctx.set_output(0, value_); }

 private:
  Tensor value_;
};

// --- data movement -------------------------------------------------------------------------------
// A Transpose that leaves every element where it is (it moves only axes of one element:
// PyTorch's sequence-first/batch-first swaps at batch 1) outputs a view of its input. Else
// oneDNN's reorder or volt's row copies.
struct TransposeState {
  std::optional<ContiguousView> view;
  std::optional<dnnl_adapter::PreparedReorder> reorder;
};

class Transpose final : public Kernel {
 public:
  explicit Transpose(const Node& n) : perm_(n.attr_ints("perm")) {}
  void infer(InferContext& ctx) const override {
    const Shape& in = ctx.shape(0);
    const auto perm = resolve_perm(perm_, in.size(), ctx.node());
    const Shape out = permuted_shape(in, perm);
    ctx.set_output(0, ctx.dtype(0), out);
    if (ctx.dtype(0) != DType::String)
      if (auto view = view_if_one_run(ctx, 0, out, permuted_strides(in, perm), out))
        return ctx.set_state(
            std::make_shared<TransposeState>(TransposeState{std::move(*view), {}}));
    // oneDNN's reorder (a JIT-compiled strided copy) for the types it knows, such as the
    // channels-last conversions around convolutions and the head split of attention. Not where
    // input shapes vary: volt's copies need no code generated for each shape (row copies, where
    // the last axis stays last, are as fast; a text-line recognizer's [W, 1, 192] transposes at
    // each new width took 0.06 ms to make against a run of tens of microseconds).
    if (dnnl_adapter::supported(ctx.dtype(0)) && numel_of(out) >= 4096 && out.size() <= 6 &&
        !ctx.shapes_vary())
      dnnl_adapter::prepare_or_fall_back(ctx, [&] {
        const auto dt = dnnl_adapter::to_dnnl(ctx.dtype(0));
        const auto src = dnnl_adapter::strided_md(out, permuted_strides(ctx.shape(0), perm), dt);
        const auto dst = dnnl_adapter::plain_md(out, dt);
        ctx.set_state(std::make_shared<TransposeState>(
            TransposeState{{}, dnnl_adapter::PreparedReorder(src, dst)}));
      });
  }
  void run(RunContext& ctx) const override {
    if (const auto* st = static_cast<const TransposeState*>(ctx.state_ptr()))
      return st->view ? output_contiguous_view(ctx, *st->view)
                      : (*st->reorder)(ctx.input(0).raw(), ctx.output(0).raw());
    permute_into(ctx.input(0), resolve_perm(perm_, ctx.input(0).rank(), ctx.node()), ctx.output(0));
  }

 private:
  std::vector<int64_t> perm_;
};

// In a region stored in oneDNN's blocks of channels (volt.layout NCHW8C / NCHW16C, the shapes
// the stored channels-last ones, axis 3), each input's channels are whole blocks: per image, an
// input is one contiguous run of the output.
class Concat final : public Kernel {
 public:
  explicit Concat(const Node& n)
      : axis_(n.attr_int("axis")), block_(block_channels(stored_layout(n))) {}
  void infer(InferContext& ctx) const override {
    const Shape& first = ctx.shape(0);
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(first.size()), ctx.node());
    if (block_)
      for (size_t i = 0; i < ctx.input_count(); ++i)
        VOLT_CHECK(axis == 3 && ctx.shape(i).size() == 4 && ctx.shape(i)[3] % block_ == 0,
                   InvalidArgument,
                   ctx.node().describe() + ": blocked inputs must be N x H x W x C with C a " +
                       "multiple of " + std::to_string(block_) + " concatenated on C, got " +
                       shape_str(ctx.shape(i)));
    Shape out = first;
    out[axis] = 0;
    for (size_t i = 0; i < ctx.input_count(); ++i) {
      const Shape& s = ctx.shape(i);
      VOLT_CHECK(ctx.dtype(i) == ctx.dtype(0), InvalidModel,
                 ctx.node().describe() + ": inputs have different dtypes");
      bool ok = s.size() == first.size();
      for (size_t d = 0; ok && d < s.size(); ++d)
        ok = static_cast<int64_t>(d) == axis || s[d] == first[d];
      VOLT_CHECK(ok, InvalidArgument,
                 ctx.node().describe() + ": input " + std::to_string(i) + " has shape " +
                     shape_str(s) + ", which does not concatenate with " + shape_str(first) +
                     " on axis " + std::to_string(axis_));
      out[axis] += s[axis];
    }
    // One image (or nothing before the axis): each input is one contiguous run of the output,
    // where its producer may write it (blocked layouts store channel blocks outermost). (Not
    // shape arithmetic: folded at plan time, or a few bytes to copy.)
    int64_t outer = 1;
    for (int64_t d = 0; d < (block_ ? 1 : axis); ++d) outer *= out[static_cast<size_t>(d)];
    constexpr int64_t kMinPartsBytes = 4096;
    if (outer == 1 && ctx.dtype(0) != DType::String &&
        numel_of(out) * static_cast<int64_t>(dtype_size(ctx.dtype(0))) >= kMinPartsBytes) {
      size_t at = 0;
      for (size_t i = 0; i < ctx.input_count(); ++i) {
        ctx.input_may_live_in_output(i, at);
        at += static_cast<size_t>(numel_of(ctx.shape(i))) * dtype_size(ctx.dtype(i));
      }
    }
    ctx.set_output(0, ctx.dtype(0), out);
  }
  void run(RunContext& ctx) const override {
    Tensor& out = ctx.output(0);
    const int64_t axis =
        block_ ? 1 : normalize_axis(axis_, static_cast<int64_t>(out.rank()), ctx.node());
    int64_t outer = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= out.dim(d);
    const int64_t out_row = out.numel() / std::max<int64_t>(outer, 1);
    dispatch_any(out.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* dst = static_cast<T*>(out.raw());
      // Each input's part of each output row is one copy, in parallel when the output is large
      // (DLRM's concatenation of nine 256 x 64 blocks: each alone is small): over rows where
      // there are many (channels-last: a row per pixel), else over rows and inputs (a blocked
      // or channels-first Concat of one image: one row, a long part per input).
      const int64_t k = static_cast<int64_t>(ctx.input_count());
      auto row_of = [&](int64_t i) { return ctx.input(i).numel() / outer; };
      const bool parallel = out.numel() > 65536;
      if (outer >= 64) {
        parallel_for(outer, parallel, [&](int64_t o) {
          T* row_out = dst + o * out_row;
          for (int64_t i = 0; i < k; ++i) {
            const int64_t row = row_of(i);
            const T* src = static_cast<const T*>(ctx.input(i).raw()) + o * row;
            row_out = std::copy(src, src + row, row_out);
          }
        });
      } else {
        parallel_for(outer * k, parallel, [&](int64_t t) {
          const int64_t o = t / k, i = t % k, row = row_of(i);
          int64_t start = 0;  // of this input's part in the row
          for (int64_t j = 0; j < i; ++j) start += row_of(j);
          const T* src = static_cast<const T*>(ctx.input(i).raw()) + o * row;
          // (An input the planner placed in its part: computed there already.)
          if (src != dst + o * out_row + start)
            std::copy(src, src + row, dst + o * out_row + start);
        });
      }
    });
  }

 private:
  int64_t axis_;
  int64_t block_;  // channels per block of a blocked layout; 0 otherwise
};

class Gather final : public Kernel {
 public:
  explicit Gather(const Node& n) : axis_(n.attr_int("axis", 0)) {}
  void infer(InferContext& ctx) const override {
    const Shape& data = ctx.shape(0);
    VOLT_CHECK(!data.empty(), InvalidArgument,
               ctx.node().describe() + ": data must have rank >= 1");
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(data.size()), ctx.node());
    Shape out(data.begin(), data.begin() + axis);
    const Shape& idx = ctx.shape(1);
    out.insert(out.end(), idx.begin(), idx.end());
    out.insert(out.end(), data.begin() + axis + 1, data.end());
    // One index known now: the output is data's block at that index, a view where it is one
    // contiguous run (the axes before the gathered one of one element: a layer of a stacked
    // cache, GPT-2's past).
    const Tensor* indices = ctx.input_tensor(1);
    if (indices && indices->numel() == 1 && worth_a_view(ctx, out)) {
      const int64_t n = data[static_cast<size_t>(axis)],
                    i = to_int64_vector(*indices, ctx.node(), "indices")[0];
      if (i >= -n && i < n) {  // (else run() reports the index)
        const std::vector<int64_t> strides = strides_of(data);
        Shape block = data;
        block[static_cast<size_t>(axis)] = 1;
        if (auto view =
                view_if_one_run(ctx, (i < 0 ? i + n : i) * strides[static_cast<size_t>(axis)],
                                std::move(block), strides, out))
          ctx.set_state(std::make_shared<ContiguousView>(std::move(*view)));
      }
    }
    ctx.set_output(0, ctx.dtype(0), std::move(out));
  }
  void run(RunContext& ctx) const override {
    if (const auto* view = static_cast<const ContiguousView*>(ctx.state_ptr()))
      return output_contiguous_view(ctx, *view);
    const Tensor& data = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    Tensor& out = ctx.output(0);
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(data.rank()), ctx.node());
    const std::vector<int64_t> idx = to_int64_vector(indices, ctx.node(), "indices");
    const int64_t n = data.dim(axis);
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= data.dim(d);
    for (size_t d = axis + 1; d < data.rank(); ++d) inner *= data.dim(d);
    for (int64_t i : idx)
      VOLT_CHECK(i >= -n && i < n, InvalidArgument,
                 ctx.node().describe() + ": index " + std::to_string(i) +
                     " is out of range for axis of size " + std::to_string(n));
    const int64_t k = static_cast<int64_t>(idx.size());
    dispatch_any(data.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* src = static_cast<const T*>(data.raw());
      T* dst = static_cast<T*>(out.raw());
      // Embedding lookups read rows at random from tables far bigger than the caches: each row
      // is asked for kAhead rows before it is copied, so the misses overlap.
      constexpr int64_t kAhead = 8;
      const int64_t row_bytes = inner * static_cast<int64_t>(sizeof(T));
      const bool prefetch = row_bytes >= 64 && data.nbytes() > (size_t{8} << 20);
      auto row = [&](int64_t o, int64_t j) {
        return src + (o * n + (idx[j] < 0 ? idx[j] + n : idx[j])) * inner;
      };
      parallel_for(outer * k, outer * k >= 64 && out.numel() > 16384, [&](int64_t oj) {
        const int64_t o = oj / k, j = oj % k;
        if (prefetch && j + kAhead < k) {
          const char* next = reinterpret_cast<const char*>(row(o, j + kAhead));
          for (int64_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(next + b);
        }
        const T* s = row(o, j);
        std::copy(s, s + inner, dst + oj * inner);
      });
    });
  }

 private:
  int64_t axis_;
};

}  // namespace

VOLT_REGISTER_KERNEL(identity, {.op = "Identity",
                                .output_aliases_input = true,
                                .create = make_kernel<Identity>});
VOLT_REGISTER_KERNEL(reshape, {.op = "Reshape",
                               .output_aliases_input = true,
                               .create = make_kernel<Reshape>});
VOLT_REGISTER_KERNEL(flatten, {.op = "Flatten",
                               .output_aliases_input = true,
                               .create = make_kernel<Flatten>});
VOLT_REGISTER_KERNEL(squeeze, {.op = "Squeeze",
                               .output_aliases_input = true,
                               .create = make_kernel<Squeeze>});
VOLT_REGISTER_KERNEL(unsqueeze, {.op = "Unsqueeze",
                                 .output_aliases_input = true,
                                 .create = make_kernel<Unsqueeze>});
VOLT_REGISTER_KERNEL(shape,
                     {.op = "Shape", .reads_metadata_only = true, .create = make_kernel<ShapeOp>});
VOLT_REGISTER_KERNEL(shape_formula, {.domain = kVoltDomain,
                                     .op = "ShapeFormula",
                                     .reads_metadata_only = true,
                                     .create = make_kernel<ShapeFormulaOp>});
VOLT_REGISTER_KERNEL(size,
                     {.op = "Size", .reads_metadata_only = true, .create = make_kernel<SizeOp>});
VOLT_REGISTER_KERNEL(constant, {.op = "Constant", .create = make_kernel<Constant>});
VOLT_REGISTER_KERNEL(transpose, {.op = "Transpose", .create = make_kernel<Transpose>});
VOLT_REGISTER_KERNEL(concat, {.op = "Concat", .create = make_kernel<Concat>});
VOLT_REGISTER_KERNEL(gather, {.op = "Gather", .create = make_kernel<Gather>});

}  // namespace volt
