// Reduce* on the device, over any axes (read on the host, where they are a host input from the
// opset that made them one). Shapes and axes follow the CPU kernels (operators/common/reduction).
#include "operators/common/reduction.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/cuda/cuda_kernel.hpp"

namespace volt::cuda {
namespace {

ReduceOp device_op(Reduction r) {
  switch (r) {
    case Reduction::Sum:
      return ReduceOp::Sum;
    case Reduction::Mean:
      return ReduceOp::Mean;
    case Reduction::Max:
      return ReduceOp::Max;
    case Reduction::Min:
      return ReduceOp::Min;
    case Reduction::Prod:
      return ReduceOp::Prod;
    case Reduction::SumSquare:
      return ReduceOp::SumSquare;
    case Reduction::L1:
      return ReduceOp::L1;
    case Reduction::L2:
      return ReduceOp::L2;
    case Reduction::LogSum:
      return ReduceOp::LogSum;
    case Reduction::LogSumExp:
      return ReduceOp::LogSumExp;
  }
  return ReduceOp::Sum;
}

class Reduce final : public Kernel {
 public:
  Reduce(const Node& n, Reduction r, int axes_input_since)
      : op_(device_op(r)), attrs_(n, axes_input_since) {}
  void infer(InferContext& ctx) const override {
    if (ctx.shape(0).size() > static_cast<size_t>(kMaxRank))
      throw KernelUnsupported{"CUDA reductions take up to 8 dims"};
    std::vector<int64_t> axes;
    if (!attrs_.axes.read(ctx.has_input(1) ? ctx.input_tensor(1) : nullptr, ctx.has_input(1),
                          ctx.node(), axes))
      return ctx.set_output_unknown(0, ctx.dtype(0));
    ctx.set_output(
        0, ctx.dtype(0),
        plan_reduce(ctx.shape(0), axes, attrs_.keepdims, attrs_.noop_with_empty_axes, ctx.node())
            .out);
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (ctx.has_input(1) && !ctx.input(1).device().is_cpu()) ctx.error("axes must be on the host");
    std::vector<int64_t> axes;
    attrs_.axes.read(ctx.has_input(1) ? &ctx.input(1) : nullptr, ctx.has_input(1), ctx.node(),
                     axes);
    const ReducePlan p =
        plan_reduce(x.shape(), axes, attrs_.keepdims, attrs_.noop_with_empty_axes, ctx.node());
    if (p.identity) {
      if (x.nbytes())
        VOLT_CUDA_CALL(cudaMemcpyAsync(y.raw(), x.raw(), x.nbytes(), cudaMemcpyDeviceToDevice,
                                       stream_of(ctx)));
      return;
    }
    int64_t n_reduced = 1;
    const ReduceGeometry g = reduce_geometry(x.shape(), p.reduced, n_reduced);
    launch_reduce(op_, elem_of(x.dtype(), ctx), y.raw(), x.raw(), y.numel(), n_reduced, g,
                  ctx.stream());
    check_launch("reduce_kernel");
  }

 private:
  ReduceOp op_;
  ReduceAttributes attrs_;
};

// One kernel per entry of kReduceOps; axes (input 1 from its opset) are read on the host.
struct RegisterReductions {
  RegisterReductions() {
    for (const ReduceOpInfo& r : kReduceOps) {
      KernelDef def =
          cuda_kernel(r.op, 1,
                      [r](const Node& n) {
                        return std::make_unique<Reduce>(n, r.reduction, r.axes_input_since);
                      },
                      {1});
      def.name = std::string("cuda_") + r.op;
      KernelRegistry::instance().add(std::move(def));
    }
  }
} g_register_reductions;

}  // namespace

}  // namespace volt::cuda
