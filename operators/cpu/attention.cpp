// ai.volt Attention on the host: softmax(scale Q Kᵀ + mask) V, one query row at a time, sums in
// the element type's compute type (float for fp16). The fuse_attention pass makes the node for
// accelerator sessions only; this kernel runs it where the device kernel declines a shape.
#include <cmath>

#include "operators/common/attention_shapes.hpp"
#include "operators/common/dispatch.hpp"
#include "operators/common/matmul_shapes.hpp"
#include "operators/common/parallel.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

// Element offsets of Q's, K's and V's matrices for each output batch index: the scores are
// MatMul(Q, Kᵀ) and the output MatMul(scores, V), each broadcasting its batch axes as MatMul does.
struct BatchOffsets {
  std::vector<int64_t> q, k, v;
};
BatchOffsets batch_offsets(const Shape& q, const Shape& k, const Shape& v, bool k_transposed,
                           const Node& node) {
  Shape kt = k;  // the shape of Kᵀ
  if (!k_transposed) std::swap(kt[kt.size() - 2], kt[kt.size() - 1]);
  const MatMulShapes qk = matmul_shapes(q, kt, node), pv = matmul_shapes(qk.out, v, node);
  const MatMulBatches scores(qk), out(pv);
  BatchOffsets o;
  for (int64_t b = 0; b < out.count(); ++b) {
    int64_t s = 0, iq = 0, ik = 0, iv = 0;
    out.operands(b, s, iv);
    scores.operands(s, iq, ik);
    o.q.push_back(iq * qk.m * qk.k);
    o.k.push_back(ik * qk.k * qk.n);
    o.v.push_back(iv * pv.k * pv.n);
  }
  return o;
}

class Attention final : public Kernel {
 public:
  explicit Attention(const Node& n) : attrs_(n) {}
  void infer(InferContext& ctx) const override {
    ctx.set_output(0, ctx.dtype(0), attrs_.infer(ctx).out);
  }
  void run(RunContext& ctx) const override {
    const Tensor &q = ctx.input(0), &k = ctx.input(1), &v = ctx.input(2);
    const Tensor* mask = ctx.has_input(3) ? &ctx.input(3) : nullptr;
    const AttentionShapes a = attrs_.of(ctx);
    const BatchOffsets off =
        batch_offsets(q.shape(), k.shape(), v.shape(), attrs_.k_transposed, ctx.node());
    const auto &qo = off.q, &ko = off.k, &vo = off.v;
    const auto ms = mask ? broadcast_strides(mask->shape(), a.scores) : std::vector<int64_t>{};
    dispatch_numeric(q.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = typename Compute<T>::type;
      if constexpr (!std::is_floating_point_v<C>) {
        ctx.error("needs floating-point inputs");
      } else {
        const T *pq = static_cast<const T*>(q.raw()), *pk = static_cast<const T*>(k.raw()),
                *pv = static_cast<const T*>(v.raw());
        const T* pm = mask ? static_cast<const T*>(mask->raw()) : nullptr;
        T* out = static_cast<T*>(ctx.output(0).raw());
        const int64_t rows = numel_of(a.batch) * a.s, r = static_cast<int64_t>(a.scores.size());
        parallel_for(rows, rows > 1, [&](int64_t row) {
          const int64_t b = row / a.s, i = row % a.s;
          const T* qr = pq + qo[b] + i * a.d;
          std::vector<C> p(static_cast<size_t>(a.s_kv)), acc(static_cast<size_t>(a.dv), C(0));
          // The mask's offset for (b, i, 0): the scores index unravelled over its strides.
          int64_t mrow = 0;
          if (pm) {
            int64_t rest = b;
            for (int64_t d = r - 3; d >= 0; --d) {
              mrow += (rest % a.scores[d]) * ms[d];
              rest /= a.scores[d];
            }
            mrow += i * ms[r - 2];
          }
          C top = -std::numeric_limits<C>::infinity();
          for (int64_t j = 0; j < a.s_kv; ++j) {
            C dot = 0;
            for (int64_t t = 0; t < a.d; ++t) {
              const T kv =
                  attrs_.k_transposed ? pk[ko[b] + t * a.s_kv + j] : pk[ko[b] + j * a.d + t];
              dot += static_cast<C>(qr[t]) * static_cast<C>(kv);
            }
            p[j] = static_cast<C>(attrs_.scale) * dot +
                   (pm ? static_cast<C>(pm[mrow + j * ms[r - 1]]) : 0);
            top = std::max(top, p[j]);
          }
          C sum = 0;
          for (C& e : p) sum += (e = std::exp(e - top));
          for (int64_t j = 0; j < a.s_kv; ++j) {
            const C w = p[j] / sum;
            const T* vr = pv + vo[b] + j * a.dv;
            for (int64_t t = 0; t < a.dv; ++t) acc[t] += w * static_cast<C>(vr[t]);
          }
          T* o = out + row * a.dv;
          for (int64_t t = 0; t < a.dv; ++t) o[t] = static_cast<T>(acc[t]);
        });
      }
    });
  }

 private:
  AttentionAttributes attrs_;
};

}  // namespace

VOLT_REGISTER_KERNEL(attention, {.domain = kVoltDomain,
                                 .op = "Attention",
                                 .types = kFloatTypes,
                                 .create = make_kernel<Attention>});

}  // namespace volt
