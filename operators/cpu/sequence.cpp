// Sequences and optionals: SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceAt,
// SequenceErase, SequenceLength, SplitToSequence, ConcatFromSequence, Optional,
// OptionalHasElement, OptionalGetElement. A tensor stored in a sequence is always a copy the
// sequence owns: inputs may live in a run's arena, which is reused once they die.
#include "operators/common/dispatch.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

TypeShape sequence_of(DType dtype) {
  return TypeShape{ValueInfo::Kind::Sequence, dtype, {}, true};
}

const std::vector<Tensor>& items_of(const RunContext& ctx, size_t i) {
  const Value& v = ctx.input_value(i);
  VOLT_CHECK(v.is_sequence(), InvalidArgument,
             ctx.node().describe() + ": input " + std::to_string(i) + " must be a sequence");
  return v.sequence_items();
}

int64_t position_of(const RunContext& ctx, size_t input, int64_t size, int64_t fallback,
                    bool inclusive) {
  if (!ctx.has_input(input)) return fallback;
  int64_t p = to_int64_vector(ctx.input(input), ctx.node(), "position")[0];
  const int64_t hi = inclusive ? size : size - 1;
  VOLT_CHECK(p >= -size && p <= hi, InvalidArgument,
             ctx.node().describe() + ": position " + std::to_string(p) +
                 " is out of range for a sequence of " + std::to_string(size));
  return p < 0 ? p + size : p;
}

class SequenceEmpty final : public Kernel {
 public:
  explicit SequenceEmpty(const Node& n) : dtype_(static_cast<DType>(n.attr_int("dtype", 1))) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, sequence_of(dtype_)); }
  void run(RunContext& ctx) const override { ctx.set_output(0, Value::sequence({}, dtype_)); }

 private:
  DType dtype_;
};

class SequenceConstruct final : public Kernel {
 public:
  explicit SequenceConstruct(const Node&) {}
  void infer(InferContext& ctx) const override {
    ctx.set_output(0, sequence_of(ctx.input(0).dtype));
  }
  void run(RunContext& ctx) const override {
    std::vector<Tensor> items;
    for (size_t i = 0; i < ctx.input_count(); ++i) items.push_back(ctx.input(i).clone());
    ctx.set_output(0, Value::sequence(std::move(items)));
  }
};

class SequenceInsert final : public Kernel {
 public:
  explicit SequenceInsert(const Node&) {}
  void infer(InferContext& ctx) const override {
    ctx.set_output(0, sequence_of(ctx.input(1).dtype));
  }
  void run(RunContext& ctx) const override {
    std::vector<Tensor> items = items_of(ctx, 0);
    const int64_t n = static_cast<int64_t>(items.size());
    const int64_t at = position_of(ctx, 2, n, n, true);
    items.insert(items.begin() + at, ctx.input(1).clone());
    ctx.set_output(0, Value::sequence(std::move(items), ctx.input(1).dtype()));
  }
};

class SequenceAt final : public Kernel {
 public:
  explicit SequenceAt(const Node&) {}
  void infer(InferContext& ctx) const override { ctx.set_output_unknown(0, ctx.input(0).dtype); }
  void run(RunContext& ctx) const override {
    const auto& items = items_of(ctx, 0);
    const int64_t n = static_cast<int64_t>(items.size());
    VOLT_CHECK(ctx.has_input(1), InvalidModel, ctx.node().describe() + ": position is required");
    ctx.set_output(0, items[position_of(ctx, 1, n, 0, false)]);
  }
};

class SequenceErase final : public Kernel {
 public:
  explicit SequenceErase(const Node&) {}
  void infer(InferContext& ctx) const override {
    ctx.set_output(0, sequence_of(ctx.input(0).dtype));
  }
  void run(RunContext& ctx) const override {
    std::vector<Tensor> items = items_of(ctx, 0);
    const int64_t n = static_cast<int64_t>(items.size());
    VOLT_CHECK(n > 0, InvalidArgument,
               ctx.node().describe() + ": cannot erase from an empty sequence");
    items.erase(items.begin() + position_of(ctx, 1, n, n - 1, false));
    ctx.set_output(0, Value::sequence(std::move(items), ctx.input_value(0).sequence_dtype()));
  }
};

class SequenceLength final : public Kernel {
 public:
  explicit SequenceLength(const Node&) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, DType::Int64, {}); }
  void run(RunContext& ctx) const override {
    ctx.output(0).data<int64_t>()[0] = static_cast<int64_t>(items_of(ctx, 0).size());
  }
};

// Copies slices [start, start + len) of `in` along `axis` into a new tensor.
Tensor take(const Tensor& in, int64_t axis, int64_t start, int64_t len) {
  Shape s = in.shape();
  s[axis] = len;
  Tensor out = Tensor::empty(in.dtype(), s);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= in.dim(d);
  for (size_t d = static_cast<size_t>(axis) + 1; d < in.rank(); ++d) inner *= in.dim(d);
  const int64_t n = in.dim(axis);
  dispatch_any(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = static_cast<const T*>(in.raw());
    T* dst = static_cast<T*>(out.raw());
    for (int64_t o = 0; o < outer; ++o)
      std::copy(src + (o * n + start) * inner, src + (o * n + start + len) * inner,
                dst + o * len * inner);
  });
  return out;
}

class SplitToSequence final : public Kernel {
 public:
  explicit SplitToSequence(const Node& n)
      : axis_(n.attr_int("axis", 0)), keepdims_(n.attr_int("keepdims", 1) != 0) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, sequence_of(ctx.dtype(0))); }
  void run(RunContext& ctx) const override {
    const Tensor& in = ctx.input(0);
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(in.rank()), ctx.node());
    const int64_t n = in.dim(axis);
    std::vector<Tensor> items;
    if (!ctx.has_input(1)) {
      for (int64_t i = 0; i < n; ++i) {
        Tensor t = take(in, axis, i, 1);
        if (!keepdims_) {
          Shape s = t.shape();
          s.erase(s.begin() + axis);
          t = t.reshaped(s);
        }
        items.push_back(t);
      }
    } else {
      const Tensor& split = ctx.input(1);
      const auto sizes = to_int64_vector(split, ctx.node(), "split");
      if (split.rank() == 0) {
        VOLT_CHECK(sizes[0] > 0, InvalidArgument,
                   ctx.node().describe() + ": split must be positive");
        for (int64_t s = 0; s < n; s += sizes[0])
          items.push_back(take(in, axis, s, std::min(sizes[0], n - s)));
      } else {
        int64_t at = 0;
        for (int64_t len : sizes) {
          VOLT_CHECK(len >= 0 && at + len <= n, InvalidArgument,
                     ctx.node().describe() + ": split sizes exceed the axis");
          items.push_back(take(in, axis, at, len));
          at += len;
        }
        VOLT_CHECK(at == n, InvalidArgument,
                   ctx.node().describe() + ": split sizes do not cover the axis");
      }
    }
    ctx.set_output(0, Value::sequence(std::move(items), in.dtype()));
  }

 private:
  int64_t axis_;
  bool keepdims_;
};

class ConcatFromSequence final : public Kernel {
 public:
  explicit ConcatFromSequence(const Node& n)
      : axis_(n.attr_int("axis")), new_axis_(n.attr_int("new_axis", 0) != 0) {}
  void infer(InferContext& ctx) const override { ctx.set_output_unknown(0, ctx.input(0).dtype); }
  void run(RunContext& ctx) const override {
    const auto& items = items_of(ctx, 0);
    VOLT_CHECK(!items.empty(), InvalidArgument,
               ctx.node().describe() + ": cannot concatenate an empty sequence");
    const Shape& first = items[0].shape();
    const int64_t rank = static_cast<int64_t>(first.size()) + (new_axis_ ? 1 : 0);
    const int64_t axis = normalize_axis(axis_, rank, ctx.node());
    Shape out = first;
    if (new_axis_)
      out.insert(out.begin() + axis, 0);
    else
      out[axis] = 0;
    for (const Tensor& t : items) {
      VOLT_CHECK(t.rank() == first.size(), InvalidArgument,
                 ctx.node().describe() + ": sequence items differ in rank");
      // Every dimension but the concatenation axis must agree (all of them with new_axis).
      for (int64_t d = 0; d < static_cast<int64_t>(first.size()); ++d)
        VOLT_CHECK(t.dim(static_cast<size_t>(d)) == first[static_cast<size_t>(d)] ||
                       (!new_axis_ && d == axis),
                   InvalidArgument,
                   ctx.node().describe() + ": sequence items of shapes " + shape_str(first) +
                       " and " + shape_str(t.shape()) + " cannot be concatenated on axis " +
                       std::to_string(axis));
      out[axis] += new_axis_ ? 1 : t.dim(axis);
    }
    Tensor& y = ctx.allocate_output(0, items[0].dtype(), out);
    int64_t outer = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= out[d];
    const int64_t row = outer ? y.numel() / outer : 0;
    dispatch_any(y.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* dst = static_cast<T*>(y.raw());
      int64_t col = 0;
      for (const Tensor& t : items) {
        const T* src = static_cast<const T*>(t.raw());
        const int64_t piece = outer ? t.numel() / outer : 0;
        for (int64_t o = 0; o < outer; ++o)
          std::copy(src + o * piece, src + (o + 1) * piece, dst + o * row + col);
        col += piece;
      }
    });
  }

 private:
  int64_t axis_;
  bool new_axis_;
};

class OptionalOp final : public Kernel {
 public:
  explicit OptionalOp(const Node&) {}
  void infer(InferContext& ctx) const override { ctx.set_output_unknown(0, DType::Undefined); }
  void run(RunContext& ctx) const override {
    if (!ctx.has_input(0)) return ctx.set_output(0, Value::none());
    const Value& v = ctx.input_value(0);
    ctx.set_output(0, v.is_tensor() ? Value(v.tensor().clone()) : v);
  }
};

class OptionalHasElement final : public Kernel {
 public:
  explicit OptionalHasElement(const Node&) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, DType::Bool, {}); }
  void run(RunContext& ctx) const override {
    ctx.output(0).data<bool>()[0] = ctx.has_input(0) && !ctx.input_value(0).is_none();
  }
};

class OptionalGetElement final : public Kernel {
 public:
  explicit OptionalGetElement(const Node&) {}
  void infer(InferContext& ctx) const override { ctx.set_output_unknown(0, DType::Undefined); }
  void run(RunContext& ctx) const override {
    const Value& v = ctx.input_value(0);
    VOLT_CHECK(!v.is_none(), InvalidArgument, ctx.node().describe() + ": the optional is empty");
    ctx.set_output(0, v);
  }
};

}  // namespace

VOLT_REGISTER_KERNEL(sequence_empty,
                     {.op = "SequenceEmpty", .since = 11, .create = make_kernel<SequenceEmpty>});
VOLT_REGISTER_KERNEL(sequence_construct, {.op = "SequenceConstruct",
                                          .since = 11,
                                          .create = make_kernel<SequenceConstruct>});
VOLT_REGISTER_KERNEL(sequence_insert,
                     {.op = "SequenceInsert", .since = 11, .create = make_kernel<SequenceInsert>});
VOLT_REGISTER_KERNEL(sequence_at,
                     {.op = "SequenceAt", .since = 11, .create = make_kernel<SequenceAt>});
VOLT_REGISTER_KERNEL(sequence_erase,
                     {.op = "SequenceErase", .since = 11, .create = make_kernel<SequenceErase>});
VOLT_REGISTER_KERNEL(sequence_length,
                     {.op = "SequenceLength", .since = 11, .create = make_kernel<SequenceLength>});
VOLT_REGISTER_KERNEL(split_to_sequence, {.op = "SplitToSequence",
                                         .since = 11,
                                         .create = make_kernel<SplitToSequence>});
VOLT_REGISTER_KERNEL(concat_from_sequence, {.op = "ConcatFromSequence",
                                            .since = 11,
                                            .create = make_kernel<ConcatFromSequence>});
VOLT_REGISTER_KERNEL(optional, {.op = "Optional", .since = 15, .create = make_kernel<OptionalOp>});
VOLT_REGISTER_KERNEL(optional_has_element, {.op = "OptionalHasElement",
                                            .since = 15,
                                            .create = make_kernel<OptionalHasElement>});
VOLT_REGISTER_KERNEL(optional_get_element, {.op = "OptionalGetElement",
                                            .since = 15,
                                            .create = make_kernel<OptionalGetElement>});

}  // namespace volt
