// Gather on the device (embedding lookups: token ids, categorical features) and its gradient
// (ai.volt GatherGrad: the rows' gradients added back where they came from). The indices are a
// host input: they are checked against the axis on the host — a device kernel could not report
// an index out of range — then copied into the step's scratch and used there.
#include <vector>

#include "operators/common/shape_util.hpp"
#include "operators/cuda/cuda_kernel.hpp"

namespace volt::cuda {
namespace {

// `idx` checked against an axis of size n and made non-negative, copied to `device_index`.
void upload_indices(RunContext& ctx, const Tensor& idx, int64_t n, int64_t* device_index) {
  if (!idx.device().is_cpu()) ctx.error("indices must be on the host");
  std::vector<int64_t> index(static_cast<size_t>(idx.numel()));
  for (int64_t i = 0; i < idx.numel(); ++i) {
    int64_t v = idx.dtype() == DType::Int64 ? idx.data<int64_t>()[i] : idx.data<int32_t>()[i];
    if (v < -n || v >= n)
      ctx.error("index " + std::to_string(v) + " is out of range for axis of size " +
                std::to_string(n));
    index[static_cast<size_t>(i)] = v < 0 ? v + n : v;
  }
  if (!index.empty())
    VOLT_CUDA_CALL(cudaMemcpyAsync(device_index, index.data(), index.size() * sizeof(int64_t),
                                   cudaMemcpyHostToDevice, stream_of(ctx)));
}

// The sizes before the axis and after it.
std::pair<int64_t, int64_t> outer_inner(const Shape& data, int64_t axis) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= data[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < data.size(); ++d) inner *= data[d];
  return {outer, inner};
}

class Gather final : public Kernel {
 public:
  explicit Gather(const Node& n) : axis_(n.attr_int("axis", 0)) {}
  void infer(InferContext& ctx) const override {
    const Shape& data = ctx.shape(0);
    if (data.empty()) ctx.input_error("Gather of a scalar");
    if (ctx.dtype(1) != DType::Int64 && ctx.dtype(1) != DType::Int32)
      ctx.input_error("indices must be int32 or int64");
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(data.size()), ctx.node());
    Shape out(data.begin(), data.begin() + axis);
    out.insert(out.end(), ctx.shape(1).begin(), ctx.shape(1).end());
    out.insert(out.end(), data.begin() + axis + 1, data.end());
    ctx.request_scratch(static_cast<size_t>(numel_of(ctx.shape(1))) * sizeof(int64_t));
    ctx.set_output(0, ctx.dtype(0), out);
  }
  void run(RunContext& ctx) const override {
    const Tensor &data = ctx.input(0), &idx = ctx.input(1);
    Tensor& y = ctx.output(0);
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(data.rank()), ctx.node());
    const int64_t n = data.dim(static_cast<size_t>(axis));
    auto* device_index = static_cast<int64_t*>(ctx.scratch());
    upload_indices(ctx, idx, n, device_index);
    if (!y.numel()) return;
    const auto [outer, inner] = outer_inner(data.shape(), axis);
    launch_gather(static_cast<int>(dtype_size(data.dtype())), y.raw(), data.raw(), device_index,
                  outer, n, idx.numel(), inner, ctx.stream());
    check_launch("gather_kernel");
  }

 private:
  int64_t axis_;
};

// Inputs dY, the indices, and the data's shape (both read on the host); output dData: zeros, then
// every gathered row's gradient added where it came from (atomically: repeated indices sum, in
// no fixed order).
class GatherGrad final : public Kernel {
 public:
  explicit GatherGrad(const Node& n) : axis_(n.attr_int("axis", 0)) {}
  void infer(InferContext& ctx) const override {
    const Tensor* s = ctx.input_tensor(2);
    if (!s) return ctx.set_output_unknown(0, ctx.dtype(0));
    if (ctx.dtype(1) != DType::Int64 && ctx.dtype(1) != DType::Int32)
      ctx.input_error("indices must be int32 or int64");
    const Shape data = to_int64_vector(*s, ctx.node(), "shape");
    if (data.empty()) ctx.input_error("the gathered data cannot be a scalar");
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(data.size()), ctx.node());
    const auto [outer, inner] = outer_inner(data, axis);
    if (numel_of(ctx.shape(0)) != outer * numel_of(ctx.shape(1)) * inner)
      ctx.input_error("the gradient does not match the gathered shape");
    ctx.request_scratch(static_cast<size_t>(numel_of(ctx.shape(1))) * sizeof(int64_t));
    ctx.set_output(0, ctx.dtype(0), data);
  }
  void run(RunContext& ctx) const override {
    const Tensor &dy = ctx.input(0), &idx = ctx.input(1);
    Tensor& dx = ctx.output(0);
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(dx.rank()), ctx.node());
    const int64_t n = dx.dim(static_cast<size_t>(axis));
    auto* device_index = static_cast<int64_t*>(ctx.scratch());
    upload_indices(ctx, idx, n, device_index);
    if (!dx.numel()) return;
    const auto [outer, inner] = outer_inner(dx.shape(), axis);
    launch_fill(elem_of(dx.dtype(), ctx), dx.raw(), dx.numel(), 0.f, ctx.stream());
    launch_scatter_add(elem_of(dx.dtype(), ctx), dx.raw(), dy.raw(), device_index, outer, n,
                       idx.numel(), inner, ctx.stream());
    check_launch("scatter_add_kernel");
  }

 private:
  int64_t axis_;
};

}  // namespace

VOLT_REGISTER_KERNEL(cuda_gather_grad,
                     cuda_volt_kernel("GatherGrad", make_kernel<GatherGrad>, {1, 2}));

VOLT_REGISTER_KERNEL(cuda_gather,
                     {.op = "Gather",
                      .device = "cuda",
                      .types = {DType::Float, DType::Float16, DType::Int64, DType::Int32},
                      .host_inputs = {1},
                      .create = make_kernel<Gather>});

}  // namespace volt::cuda
