// The shapes of ai.volt Attention (runtime/passes/fuse_attention.cpp), shared by its CPU and
// CUDA kernels: Q [..., S, D]; K [..., S', D] (or Kᵀ [..., D, S'] with k_transposed); V
// [..., S', Dv]; the batch axes broadcast as MatMul's do; the optional mask broadcasts to the
// scores [batch..., S, S']; the output is [batch..., S, Dv].
#pragma once
#include "operators/common/shape_util.hpp"
#include "operators/kernel.hpp"

namespace volt {

struct AttentionShapes {
  int64_t s = 0, s_kv = 0, d = 0, dv = 0;
  Shape batch, scores, out;
};

inline Shape leading(const Shape& s) {
  return Shape(s.begin(), s.end() - 2);
}

// Checks the operands (InvalidArgument naming the node on a mismatch).
inline AttentionShapes attention_shapes(const Shape& q, const Shape& k, const Shape& v,
                                        const Shape* mask, bool k_transposed, const Node& node) {
  auto bad = [&](const std::string& why) {
    fail(ErrorCode::InvalidArgument, node.describe() + ": " + why + " (Q " + shape_str(q) + ", K " +
                                         shape_str(k) + ", V " + shape_str(v) + ")");
  };
  if (q.size() < 2 || k.size() < 2 || v.size() < 2) bad("Q, K and V must be at least 2-D");
  AttentionShapes a;
  a.s = q[q.size() - 2];
  a.d = q.back();
  a.s_kv = k_transposed ? k.back() : k[k.size() - 2];
  if ((k_transposed ? k[k.size() - 2] : k.back()) != a.d) bad("Q and K differ in depth");
  if (v[v.size() - 2] != a.s_kv) bad("V's rows are not K's");
  a.dv = v.back();
  a.batch = broadcast_shapes({leading(q), leading(k), leading(v)}, node);
  a.scores = a.batch;
  a.scores.push_back(a.s);
  a.scores.push_back(a.s_kv);
  a.out = a.batch;
  a.out.push_back(a.s);
  a.out.push_back(a.dv);
  if (mask && broadcast_shapes({*mask, a.scores}, node) != a.scores)
    bad("the mask " + shape_str(*mask) + " does not broadcast to the scores " +
        shape_str(a.scores));
  return a;
}

// The node's attributes, and its shapes read from a kernel's context.
struct AttentionAttributes {
  float scale;
  bool k_transposed;
  explicit AttentionAttributes(const Node& n)
      : scale(n.attr_float("scale", 1.0f)), k_transposed(n.attr_int("k_transposed", 0) != 0) {}
  // InvalidArgument unless Q, K, V and the mask share one dtype.
  static void check_dtypes(const InferContext& ctx) {
    for (size_t i = 1; i < 4; ++i)
      if (ctx.has_input(i) && ctx.dtype(i) != ctx.dtype(0))
        ctx.input_error("Q, K, V and the mask must have one dtype");
  }
  // At planning: also checks that the operands share one dtype.
  AttentionShapes infer(InferContext& ctx) const {
    check_dtypes(ctx);
    const Shape mask = ctx.has_input(3) ? ctx.shape(3) : Shape{};
    return attention_shapes(ctx.shape(0), ctx.shape(1), ctx.shape(2),
                            ctx.has_input(3) ? &mask : nullptr, k_transposed, ctx.node());
  }
  AttentionShapes of(const RunContext& ctx) const {
    const Shape mask = ctx.has_input(3) ? ctx.input(3).shape() : Shape{};
    return attention_shapes(ctx.input(0).shape(), ctx.input(1).shape(), ctx.input(2).shape(),
                            ctx.has_input(3) ? &mask : nullptr, k_transposed, ctx.node());
  }
};

}  // namespace volt
