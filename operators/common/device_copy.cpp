// The copy nodes that the place_on_device pass puts where values cross between the host and an
// accelerator. They work through the device backend (runtime/device.hpp), whatever its kind.
#include "operators/registry.hpp"
#include "runtime/device.hpp"

namespace volt {
namespace {

void infer_same(InferContext& ctx) {
  const TypeShape& t = ctx.input(0);
  if (t.kind != ValueInfo::Kind::Tensor || t.dtype == DType::String)
    ctx.input_error(std::string("only numeric tensors move between devices, not ") +
                    (t.kind == ValueInfo::Kind::Tensor ? "strings" : "sequences or sparse values"));
  ctx.set_output(0, t);
}

// Host (or already device-resident, when the caller fed it so) -> the accelerator.
class CopyToDevice final : public Kernel {
 public:
  explicit CopyToDevice(const Node&) {}
  void infer(InferContext& ctx) const override { infer_same(ctx); }
  void run(RunContext& ctx) const override {
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

}  // namespace volt
