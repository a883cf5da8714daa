#include "operators/common/slice_window.hpp"

#include <algorithm>

#include "operators/common/shape_util.hpp"
#include "operators/common/strided_gather.hpp"

namespace volt {

bool worth_a_view(const InferContext& ctx, const Shape& out) {
  constexpr int64_t kMinViewBytes = 1024;
  return ctx.dtype(0) != DType::String &&
         numel_of(out) * static_cast<int64_t>(dtype_size(ctx.dtype(0))) >= kMinViewBytes;
}

std::optional<ContiguousView> view_if_one_run(InferContext& ctx, int64_t offset,
                                              std::vector<int64_t> shape,
                                              std::vector<int64_t> strides, const Shape& out) {
  if (numel_of(out) == 0 || !is_one_run(std::move(shape), std::move(strides)) ||
      !ctx.output_views_input())
    return std::nullopt;
  return ContiguousView{offset, out};
}

void output_contiguous_view(RunContext& ctx, const ContiguousView& view) {
  const Tensor& in = ctx.input(0);
  char* first = static_cast<char*>(const_cast<void*>(in.raw())) +
                view.offset * static_cast<int64_t>(dtype_size(in.dtype()));
  ctx.set_output(0, Tensor::view(in.dtype(), view.out, first, in.owner(), in.device()));
}

SliceWindow slice_window(const Shape& in, const std::vector<int64_t>& starts,
                         const std::vector<int64_t>& ends, std::vector<int64_t> axes,
                         const std::vector<int64_t>& steps, const Node& node) {
  const int64_t r = static_cast<int64_t>(in.size());
  VOLT_CHECK(starts.size() == ends.size(), InvalidArgument,
             node.describe() + ": starts and ends differ in length");
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  VOLT_CHECK(
      axes.size() == starts.size() && (steps.empty() || steps.size() == starts.size()),
      InvalidArgument,
      node.describe() + ": starts, ends, axes and steps must have one value per sliced axis");
  SliceWindow w{std::vector<int64_t>(in.size(), 0), std::vector<int64_t>(in.size(), 1), in};
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t a = normalize_axis(axes[i], r, node);
    const int64_t dim = in[a], step = steps.empty() ? 1 : steps[i];
    VOLT_CHECK(step != 0, InvalidArgument, node.describe() + ": slice step cannot be 0");
    int64_t s = starts[i], e = ends[i];
    if (step > 0) {
      s = clamp_slice_bound(s, dim);
      e = clamp_slice_bound(e, dim);
      w.out[a] = e > s ? (e - s + step - 1) / step : 0;
    } else {
      if (s < 0) s += dim;
      if (e < 0) e += dim;
      s = std::clamp<int64_t>(s, -1, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      w.out[a] = s > e ? (s - e - step - 1) / (-step) : 0;
    }
    w.start[a] = s;
    w.step[a] = step;
  }
  return w;
}

SliceParameters::SliceParameters(const Node& n) : legacy_(n.opset < 10) {
  if (legacy_) {
    starts_ = n.attr_ints("starts");
    ends_ = n.attr_ints("ends");
    axes_ = n.attr_ints("axes");
  }
}

template <class Input>
std::optional<SliceWindow> SliceParameters::window_of(const Shape& in, const Node& node,
                                                      Input&& input) const {
  std::vector<int64_t> starts = starts_, ends = ends_, axes = axes_, steps;
  if (!legacy_) {
    std::vector<int64_t>* into[] = {&starts, &ends, &axes, &steps};
    const char* names[] = {"starts", "ends", "axes", "steps"};
    for (size_t i = 1; i <= 4; ++i) {
      const auto [given, value] = input(i);
      if (!given) continue;
      if (!value) return std::nullopt;
      *into[i - 1] = to_int64_vector(*value, node, names[i - 1]);
    }
  }
  return slice_window(in, starts, ends, axes, steps, node);
}

std::optional<SliceWindow> SliceParameters::window(const InferContext& ctx) const {
  return window_of(ctx.shape(0), ctx.node(), [&](size_t i) {
    return std::pair<bool, const Tensor*>(ctx.has_input(i),
                                          ctx.has_input(i) ? ctx.input_tensor(i) : nullptr);
  });
}

SliceWindow SliceParameters::window(const RunContext& ctx) const {
  return *window_of(ctx.input(0).shape(), ctx.node(), [&](size_t i) {
    return std::pair<bool, const Tensor*>(ctx.has_input(i),
                                          ctx.has_input(i) ? &ctx.input(i) : nullptr);
  });
}

}  // namespace volt
