// ChannelsFirst (ai.volt): a 4-D activation stored as volt.layout says (NHWC, or NCHW16C /
// NCHW8C in a tensor of the channels-last shape) as the graph's channels-first tensor. The
// use_blocked_layout pass puts it where values leave a region of blocked convolutions (a Transpose
// does it for NHWC).
#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/layout.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

class ChannelsFirst final : public Kernel {
 public:
  explicit ChannelsFirst(const Node& n) : layout_(stored_layout(n)) {}

  void infer(InferContext& ctx) const override {
    const Shape logical =
        logical_shape(ctx.shape(0), layout_ != StoredLayout::ChannelsFirst, ctx.node());
    ctx.set_output(0, ctx.dtype(0), logical);
    const int64_t block = block_channels(layout_);
    if (!block) return;
    const Shape& s = ctx.shape(0);
    VOLT_CHECK(s.size() == 4 && s[3] % block == 0, InvalidArgument,
               ctx.node().describe() + ": blocked values must be N x H x W x C with C a " +
                   "multiple of " + std::to_string(block) + ", got " + shape_str(s));
    const auto dt = dnnl_adapter::to_dnnl(ctx.dtype(0));
    if (dt == dnnl::memory::data_type::undef) return;  // run() says so
    // In a plan for one of several shapes, volt's gather: a reorder is code generated for each
    // shape (0.05 ms at each new width of a text-line recognizer, whose run copies 9K floats).
    if (ctx.shapes_vary() && dtype_size(ctx.dtype(0)) == 4 && numel_of(logical) > 0) {
      const int64_t n = logical[0], c = logical[1], pixels = numel_of(logical) / (n * c);
      // Y [N, C / block, block, pixels] from the blocks [N, C / block, pixels, block].
      return ctx.set_state(
          std::make_shared<dnnl_adapter::PreparedReorder>(dnnl_adapter::PreparedReorder::gather(
              {n, c / block, block, pixels}, {c * pixels, pixels * block, 1, block})));
    }
    // The reorder made once per plan: the exit runs on every inference.
    dnnl_adapter::prepare_or_fall_back(ctx, [&] {
      ctx.set_state(std::make_shared<dnnl_adapter::PreparedReorder>(
          activation_md(logical, dt, layout_), dnnl_adapter::plain_md(logical, dt)));
    });
  }

  void run(RunContext& ctx) const override {
    if (const auto* reorder = static_cast<const dnnl_adapter::PreparedReorder*>(ctx.state_ptr()))
      return (*reorder)(ctx.input(0).raw(), ctx.output(0).raw());
    read_channels_first(ctx.input(0), layout_, ctx.output(0));
  }

 private:
  StoredLayout layout_;
};

}  // namespace

VOLT_REGISTER_KERNEL(channels_first, volt_kernel("ChannelsFirst", make_kernel<ChannelsFirst>));

}  // namespace volt
