// The copy nodes that the place_on_device pass puts where values cross between the host and an
// accelerator. They work through the device backend (runtime/device.hpp), whatever its kind.
#include "operators/registry.hpp"
#include "runtime/device.hpp"

namespace volt {
namespace {

void infer_same(InferContext& ctx) {
  ctx.set_output(0, ctx.input(0));
}

// Strings, sequences and optionals live on the host only: the placement pass routes values by
// their producer's device before types are known, so a copy node may meet one. It passes such a
// value through where it is, and the kernels reading it choose the host (a device kernel
// declines them at plan time). Returns whether the input was one. (Read off the value: no
// TypeShape, and so no shape copied, per copy and run.)
bool passed_through(RunContext& ctx) {
  const Value& x = ctx.input_value(0);
  const bool movable = x.is_csr() || (x.is_tensor() && x.tensor().dtype() != DType::String);
  if (movable) return false;
  ctx.set_output(0, x);
  return true;
}

// A CSR matrix (a sparse graph input that a device kernel multiplies as it is) moves as its
// three arrays; returns whether the input was one.
bool moved_csr(RunContext& ctx, Device to) {
  const Value& x = ctx.input_value(0);
  if (!x.is_csr()) return false;
  ctx.set_output(0, x.csr().to(to));
  return true;
}

// Host (or already device-resident, when the caller fed it so) -> the accelerator.
class CopyToDevice final : public Kernel {
 public:
  explicit CopyToDevice(const Node&) {}
  void infer(InferContext& ctx) const override { infer_same(ctx); }
  void run(RunContext& ctx) const override {
    if (passed_through(ctx) || moved_csr(ctx, ctx.device())) return;
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (x.device() == y.device()) {  // fed on the device already: no copy
      ctx.set_output(0, x);
      return;
    }
    if (!x.device().is_cpu()) {  // another accelerator: through the host
      const Tensor host = x.to(Device{});
      require_device(y.device())
          .copy_to_device(y.device().index, y.raw(), host.raw(), host.nbytes(), ctx.stream());
      return;
    }
    if (x.nbytes())
      require_device(y.device())
          .copy_to_device(y.device().index, y.raw(), x.raw(), x.nbytes(), ctx.stream());
  }
};

class CopyToHost final : public Kernel {
 public:
  explicit CopyToHost(const Node&) {}
  void infer(InferContext& ctx) const override { infer_same(ctx); }
  void run(RunContext& ctx) const override {
    if (passed_through(ctx) || moved_csr(ctx, Device{})) return;
    const Tensor& x = ctx.input(0);
    if (x.device().is_cpu()) {
      ctx.set_output(0, x);
      return;
    }
    Tensor& y = ctx.output(0);
    if (x.nbytes())
      require_device(x.device())
          .copy_to_host(x.device().index, y.raw(), x.raw(), x.nbytes(), ctx.stream());
  }
};

}  // namespace

VOLT_REGISTER_KERNEL(copy_to_device, {.domain = kVoltDomain,
                                      .op = "CopyToDevice",
                                      .device = "cuda",
                                      .fold_always = true,
                                      .moves_between_devices = true,
                                      .create = make_kernel<CopyToDevice>});
VOLT_REGISTER_KERNEL(copy_to_host, {.domain = kVoltDomain,
                                    .op = "CopyToHost",
                                    .moves_between_devices = true,
                                    .create = make_kernel<CopyToHost>});
// The same nodes for a CSR input (kernels say which kind their input 0 takes).
VOLT_REGISTER_KERNEL(copy_csr_to_device, {.domain = kVoltDomain,
                                          .op = "CopyToDevice",
                                          .device = "cuda",
                                          .moves_between_devices = true,
                                          .csr_input0 = true,
                                          .create = make_kernel<CopyToDevice>});
VOLT_REGISTER_KERNEL(copy_csr_to_host, {.domain = kVoltDomain,
                                        .op = "CopyToHost",
                                        .moves_between_devices = true,
                                        .csr_input0 = true,
                                        .create = make_kernel<CopyToHost>});

}  // namespace volt
