// Gather on the device (embedding lookups: token ids, categorical features). The indices are a
// host input: they are checked against the axis on the host — a device kernel could not report
// an index out of range — then copied into the step's scratch and used there.
#include <vector>

#include "operators/common/shape_util.hpp"
#include "operators/cuda/cuda_kernel.hpp"

namespace volt::cuda {
namespace {

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
    if (!idx.device().is_cpu()) ctx.error("indices must be on the host");
    const int64_t axis = normalize_axis(axis_, static_cast<int64_t>(data.rank()), ctx.node());
    const int64_t n = data.dim(static_cast<size_t>(axis));
    std::vector<int64_t> index(static_cast<size_t>(idx.numel()));
    for (int64_t i = 0; i < idx.numel(); ++i) {
      int64_t v = idx.dtype() == DType::Int64 ? idx.data<int64_t>()[i] : idx.data<int32_t>()[i];
      if (v < -n || v >= n)
        ctx.error("index " + std::to_string(v) + " is out of range for axis of size " +
                  std::to_string(n));
      index[static_cast<size_t>(i)] = v < 0 ? v + n : v;
    }
    if (!y.numel()) return;
    auto* device_index = static_cast<int64_t*>(ctx.scratch());
    VOLT_CUDA_CALL(cudaMemcpyAsync(device_index, index.data(), index.size() * sizeof(int64_t),
                                   cudaMemcpyHostToDevice, stream_of(ctx)));
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= data.dim(static_cast<size_t>(d));
    for (size_t d = static_cast<size_t>(axis) + 1; d < data.rank(); ++d) inner *= data.dim(d);
    launch_gather(static_cast<int>(dtype_size(data.dtype())), y.raw(), data.raw(), device_index,
                  outer, n, idx.numel(), inner, ctx.stream());
    check_launch("gather_kernel");
  }

 private:
  int64_t axis_;
};

}  // namespace

VOLT_REGISTER_KERNEL(cuda_gather,
                     {.op = "Gather",
                      .device = "cuda",
                      .types = {DType::Float, DType::Float16, DType::Int64, DType::Int32},
                      .host_inputs = {1},
                      .create = make_kernel<Gather>});

}  // namespace volt::cuda
