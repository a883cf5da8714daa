#include "operators/cpu/conv_pointwise_matmul.hpp"

#include "operators/common/own_activation.hpp"

namespace volt {

namespace {

// oneDNN's matmul blocks L by 16: a shorter last block runs its tail kernel.
constexpr int64_t kLongRows = 256;

// The primitive for `s` over L = `l` positions; null where oneDNN offers only its reference loop.
std::shared_ptr<const PointwiseMatmul> make_pointwise_matmul(InferContext& ctx, const ConvShapes& s,
                                                             const FusedActivation& act,
                                                             bool residual, int64_t l) {
  using dt = dnnl::memory::data_type;
  return dnnl_adapter::guarded(ctx.node(), [&] {
    auto p = std::make_shared<PointwiseMatmul>();
    p->w = dnnl_adapter::plain_md({1, s.m, s.c}, dt::f32);
    p->x = dnnl_adapter::plain_md({s.n, s.c, l}, dt::f32);
    p->y = dnnl_adapter::plain_md({s.n, s.m, l}, dt::f32);
    dnnl::post_ops ops;
    if (ctx.has_input(2)) {
      p->has_bias = true;
      p->bias = dnnl_adapter::plain_md({1, s.m, 1}, dt::f32);
      ops.append_binary(dnnl::algorithm::binary_add, p->bias);
    }
    // Conv's order: the bias, the residual, then the activation.
    if (residual) ops.append_sum(1.0f);
    p->own_activation = has_own_activation(act);
    if (!p->own_activation) act.append_to(ops);
    dnnl::primitive_attr attr = dnnl_adapter::scratch_attr();
    attr.set_post_ops(ops);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(p->w, p->x, p->y), attr,
                                          dnnl_adapter::engine());
    if (dnnl_adapter::is_reference(pd)) return std::shared_ptr<PointwiseMatmul>();
    p->prim = dnnl::matmul(pd);
    p->scratch = pd.scratchpad_desc();
    ctx.request_scratch(p->scratch.get_size());
    return p;
  });
}

}  // namespace

std::shared_ptr<const PointwiseMatmul> plan_pointwise_matmul(InferContext& ctx, const ConvShapes& s,
                                                             const FusedActivation& act,
                                                             bool residual) {
  if (s.group != 1 || ctx.dtype(0) != DType::Float || ctx.dtype(1) != DType::Float ||
      (residual && ctx.dtype(3) != DType::Float))
    return nullptr;
  const WindowGeometry& win = s.win;
  for (size_t d = 0; d < win.kernel.size(); ++d)
    if (win.kernel[d] != 1 || win.strides[d] != 1 || win.pad_begin[d] != 0 || win.pad_end[d] != 0)
      return nullptr;
  const int64_t l = numel_of(Shape(s.out.begin() + 2, s.out.end()));
  if (l < 16 || (l % 16 != 0 && l < kLongRows)) return nullptr;
  // (A configuration oneDNN's matmul lacks leaves the node to the convolution, not to Conv's
  // reference loop: KernelUnsupported stops here.)
  try {
    return make_pointwise_matmul(ctx, s, act, residual, l);
  } catch (const KernelUnsupported&) {
    return nullptr;
  }
}

void run_pointwise_matmul(const PointwiseMatmul& p, const FusedActivation& act, const float* w,
                          const float* x, const float* bias, float* y, void* scratch) {
  // (oneDNN's matmul names its operands src, weights: here W is src, X the "weights".)
  dnnl_adapter::Args args = {
      {DNNL_ARG_SRC, p.w, w}, {DNNL_ARG_WEIGHTS, p.x, x}, {DNNL_ARG_DST, p.y, y}};
  if (p.has_bias) args.add(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, p.bias, bias);
  dnnl_adapter::execute(p.prim, args, p.scratch, scratch);
  if (p.own_activation) apply_own_activation_in_parallel(act, y, p.y.get_size() / sizeof(float));
}

}  // namespace volt
