// ai.volt Attention on the host: softmax(scale Q Kᵀ + mask) V, with the Transposes that split
// and join the heads folded in (volt.perm_q, volt.perm_k, volt.perm_v, volt.perm_y:
// fold_transpose_into_matmul), each operand read through its strides.
//
// f32 on CPUs with AVX-512 (what fuse_attention makes the node for in CPU sessions): each batch's
// Kᵀ (times the scale) and V are packed for volt's product kernel, then each block of query rows
// has its scores computed into a tile of its thread's own, masked and normalized there, and
// multiplied by V: the scores never leave the cache, where MatMul, Softmax and MatMul passed over
// all of them in memory (a text classifier's 4 heads x 160 x 160 scores, 400 KiB a layer), and
// the run's arena holds none. Elsewhere (other dtypes, other CPUs: accelerator sessions whose
// device kernel declines a shape) one query row at a time in the element type's compute type.
#include <cmath>

#include "operators/common/attention_shapes.hpp"
#include "operators/common/cpu_isa.hpp"
#include "operators/common/dispatch.hpp"
#include "operators/common/layout.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/simd_clones.hpp"
#include "operators/cpu/packed_product.hpp"
#include "operators/cpu/softmax_rows.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

// An operand as the kernel reads it: its shape with the folded Transpose applied, and the
// strides that read the stored tensor so.
struct Operand {
  Shape dims;
  std::vector<int64_t> strides;
};
Operand read_through(const Shape& stored, const std::vector<int64_t>& perm, const Node& node) {
  if (perm.empty()) return {stored, strides_of(stored)};
  const std::vector<int64_t> p = resolve_perm(perm, stored.size(), node);
  return {permuted_shape(stored, p), permuted_strides(stored, p)};
}

// Element offset of each output batch's matrix in an operand (the batch axes aligned from the
// right, broadcast where the operand's axis is 1).
std::vector<int64_t> batch_offsets(const Shape& batch, const Operand& x) {
  const size_t nb = batch.size(), lacking = nb - (x.dims.size() - 2);
  std::vector<int64_t> out(static_cast<size_t>(numel_of(batch)));
  for (size_t b = 0; b < out.size(); ++b) {
    int64_t rest = static_cast<int64_t>(b), at = 0;
    for (size_t i = nb; i-- > lacking;) {
      const int64_t index = rest % batch[i];
      rest /= batch[i];
      if (x.dims[i - lacking] != 1) at += index * x.strides[i - lacking];
    }
    out[b] = at;
  }
  return out;
}

// The mask's element offset for the scores' row (b, i), b an index of the scores' batch axes:
// (b, i, 0) unravelled over the mask's broadcast strides `ms`.
int64_t mask_row(const AttentionShapes& a, const std::vector<int64_t>& ms, int64_t b, int64_t i) {
  const int64_t r = static_cast<int64_t>(a.scores.size());
  int64_t at = 0, rest = b;
  for (int64_t d = r - 3; d >= 0; --d) {
    at += (rest % a.scores[d]) * ms[d];
    rest /= a.scores[d];
  }
  return at + i * ms[r - 2];
}

// The few-rows path's pieces, vectorized for each instruction set: scores[j] = scale (q . row j
// of K), K's rows `ldk` apart with their elements adjacent; the same from Kᵀ's rows (`ldkt`
// apart); and y = sum over j of w[j] V's row j (rows `ldv` apart).
VOLT_SIMD_CLONES void scores_from_rows(const float* q, const float* k, int64_t ldk, int64_t n,
                                       int64_t d, float scale, float* scores) {
  for (int64_t j = 0; j < n; ++j) {
    const float* row = k + j * ldk;
    float acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t t = 0; t < d; ++t) acc += q[t] * row[t];
    scores[j] = acc * scale;
  }
}
VOLT_SIMD_CLONES void scores_from_columns(const float* q, const float* kt, int64_t ldkt, int64_t n,
                                          int64_t d, float scale, float* scores) {
  for (int64_t j = 0; j < n; ++j) scores[j] = 0;
  for (int64_t t = 0; t < d; ++t) {
    const float c = q[t] * scale;
    const float* row = kt + t * ldkt;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) scores[j] += c * row[j];
  }
}
VOLT_SIMD_CLONES void weighted_rows(const float* w, const float* v, int64_t ldv, int64_t n,
                                    int64_t dv, float* y) {
  for (int64_t t = 0; t < dv; ++t) y[t] = 0;
  for (int64_t j = 0; j < n; ++j) {
    const float c = w[j];
    const float* row = v + j * ldv;
#pragma omp simd
    for (int64_t t = 0; t < dv; ++t) y[t] += c * row[t];
  }
}

// Rows of n floats, `ld` apart, each times its factor.
VOLT_SIMD_CLONES void scale_rows(float* y, int64_t rows, int64_t n, int64_t ld,
                                 const float* factors) {
  for (int64_t r = 0; r < rows; ++r, y += ld) {
    const float f = factors[r];
#pragma omp simd
    for (int64_t t = 0; t < n; ++t) y[t] *= f;
  }
}

// At most this many query rows (a decoder's step: one row over its past) take the few-rows path:
// K and V read where they lie, as often as there are rows, rather than packed for the product
// kernel, whose packing costs as much as the products there (GPT-2's step, 4 heads of 64 over a
// past of 200: 18 us an attention packed, against 8 for MatMul, Softmax and MatMul).
constexpr int64_t kFewRows = 4;

// The node's operands at one set of shapes, and where each output batch's matrices lie: made at
// plan time (the step's state), so that a run allocates none of it; again at run time only for a
// step whose shapes are known then.
struct Problem {
  AttentionShapes a;
  Operand q, k, v;
  Shape y_stored;
  std::vector<int64_t> y_strides;       // the result's logical axes in Y as stored
  std::vector<int64_t> qo, ko, vo, yo;  // by output batch: element offsets (batch_offsets)
  std::vector<int64_t> ms;              // the mask's strides broadcast to the scores; empty: none
};

// Query rows per task of the packed path: two of the kernel's blocks of rows.
constexpr int64_t kQueryRows = 24;

// f32 on AVX-512, Q's and Y's rows with their elements adjacent.
bool takes_packed_path(DType dtype, const Problem& p) {
  const AttentionShapes& a = p.a;
  return dtype == DType::Float && a.s > 0 && a.s_kv > 0 && a.d > 0 && a.dv > 0 &&
         p.q.strides.back() == 1 && p.y_strides.back() == 1 && cpu_has_avx512() &&
         cpu_has_avx512f();
}

// Of those, the ones with at most kFewRows query rows whose K (or Kᵀ) and V have their rows'
// elements adjacent: run_few_rows, without packing.
bool takes_few_rows(const Problem& p) {
  return p.a.s <= kFewRows && p.k.strides.back() == 1 && p.v.strides.back() == 1;
}

// The scratch: each batch's Kᵀ and V packed (not for a few rows), then, for each of `threads`
// threads, a tile of kQueryRows rows of scores (one row for a few rows).
struct PackedScratch {
  int64_t k_floats = 0, v_floats = 0, batches = 0, tile_floats = 0;
  explicit PackedScratch(const Problem& p) : batches(numel_of(p.a.batch)) {
    const AttentionShapes& a = p.a;
    const bool few = takes_few_rows(p);
    k_floats = few ? 0 : packed_floats(a.d, a.s_kv);
    v_floats = few ? 0 : packed_floats(a.s_kv, a.dv);
    tile_floats = (few ? 1 : kQueryRows) * a.s_kv;
  }
  size_t bytes(int threads) const {
    return static_cast<size_t>(batches * (k_floats + v_floats) + threads * tile_floats) *
               sizeof(float) +
           64;  // (room to align the start)
  }
};

class Attention final : public Kernel {
 public:
  explicit Attention(const Node& n)
      : attrs_(n),
        perm_q_(n.attr_ints("volt.perm_q")),
        perm_k_(n.attr_ints("volt.perm_k")),
        perm_v_(n.attr_ints("volt.perm_v")),
        perm_y_(n.attr_ints("volt.perm_y")) {}

  void infer(InferContext& ctx) const override {
    AttentionAttributes::check_dtypes(ctx);
    const Shape mask = ctx.has_input(3) ? ctx.shape(3) : Shape{};
    auto p = std::make_shared<Problem>(problem(ctx.node(), ctx.shape(0), ctx.shape(1), ctx.shape(2),
                                               ctx.has_input(3) ? &mask : nullptr));
    ctx.set_output(0, ctx.dtype(0), p->y_stored);
    if (takes_packed_path(ctx.dtype(0), *p))
      ctx.request_scratch(PackedScratch(*p).bytes(ctx.threads()));
    else
      ctx.runs_reference_loop(
          "Attention one query row at a time (f32 with AVX-512 takes the "
          "product kernel)");
    ctx.set_state(std::move(p));
  }

  void run(RunContext& ctx) const override {
    const Tensor &q = ctx.input(0), &k = ctx.input(1), &v = ctx.input(2);
    const Tensor* mask = ctx.has_input(3) ? &ctx.input(3) : nullptr;
    const Shape mask_shape = mask ? mask->shape() : Shape{};
    Problem made;
    const auto* planned = static_cast<const Problem*>(ctx.state_ptr());
    if (!planned)
      made = problem(ctx.node(), q.shape(), k.shape(), v.shape(), mask ? &mask_shape : nullptr);
    const Problem& p = planned ? *planned : made;
    const AttentionShapes& a = p.a;
    const auto &qo = p.qo, &ko = p.ko, &vo = p.vo, &yo = p.yo, &ms = p.ms;
    if (takes_packed_path(q.dtype(), p) && ctx.scratch())
      return run_packed(ctx, p, mask ? mask->data<float>() : nullptr);
    // Kᵀ's element (t, j) at t kt_t + j kt_j; V's (j, t) at j v_j + t v_t; Q's and Y's rows.
    const int64_t kt_t = attrs_.k_transposed ? p.k.strides.end()[-2] : p.k.strides.back(),
                  kt_j = attrs_.k_transposed ? p.k.strides.back() : p.k.strides.end()[-2];
    const int64_t v_j = p.v.strides.end()[-2], v_t = p.v.strides.back();
    const int64_t q_i = p.q.strides.end()[-2], q_t = p.q.strides.back();
    const int64_t y_i = p.y_strides.end()[-2], y_t = p.y_strides.back();
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
        const int64_t rows = numel_of(a.batch) * a.s;
        const int64_t mask_column = pm ? ms.back() : 0;
        parallel_for(rows, rows > 1, [&](int64_t row) {
          const int64_t b = row / a.s, i = row % a.s;
          const T* qr = pq + qo[b] + i * q_i;
          std::vector<C> w(static_cast<size_t>(a.s_kv)), acc(static_cast<size_t>(a.dv), C(0));
          const int64_t mrow = pm ? mask_row(a, ms, b, i) : 0;
          C top = -std::numeric_limits<C>::infinity();
          for (int64_t j = 0; j < a.s_kv; ++j) {
            C dot = 0;
            for (int64_t t = 0; t < a.d; ++t)
              dot += static_cast<C>(qr[t * q_t]) * static_cast<C>(pk[ko[b] + t * kt_t + j * kt_j]);
            w[j] = static_cast<C>(attrs_.scale) * dot +
                   (pm ? static_cast<C>(pm[mrow + j * mask_column]) : 0);
            top = std::max(top, w[j]);
          }
          C sum = 0;
          for (C& e : w) sum += (e = std::exp(e - top));
          for (int64_t j = 0; j < a.s_kv; ++j) {
            const C weight = w[j] / sum;
            const T* vr = pv + vo[b] + j * v_j;
            for (int64_t t = 0; t < a.dv; ++t) acc[t] += weight * static_cast<C>(vr[t * v_t]);
          }
          T* o = out + yo[b] + i * y_i;
          for (int64_t t = 0; t < a.dv; ++t) o[t * y_t] = static_cast<T>(acc[t]);
        });
      }
    });
  }

 private:
  Problem problem(const Node& node, const Shape& q, const Shape& k, const Shape& v,
                  const Shape* mask) const {
    Problem p;
    p.q = read_through(q, perm_q_, node);
    p.k = read_through(k, perm_k_, node);
    p.v = read_through(v, perm_v_, node);
    p.a = attention_shapes(p.q.dims, p.k.dims, p.v.dims, mask, attrs_.k_transposed, node);
    const std::vector<int64_t> perm_y =
        perm_y_.empty() ? perm_y_ : resolve_perm(perm_y_, p.a.out.size(), node);
    p.y_stored = perm_y.empty() ? p.a.out : permuted_shape(p.a.out, perm_y);
    p.y_strides = logical_strides(p.a.out, perm_y);
    p.qo = batch_offsets(p.a.batch, p.q);
    p.ko = batch_offsets(p.a.batch, p.k);
    p.vo = batch_offsets(p.a.batch, p.v);
    // (The result's batch axes are all of the scores'.)
    p.yo = batch_offsets(p.a.batch, Operand{p.a.out, p.y_strides});
    if (mask) p.ms = broadcast_strides(*mask, p.a.scores);
    return p;
  }

  void run_packed(RunContext& ctx, const Problem& p, const float* mask) const {
    const auto &qo = p.qo, &ko = p.ko, &vo = p.vo, &yo = p.yo, &ms = p.ms;
    const AttentionShapes& a = p.a;
    const PackedScratch layout(p);
    const float *q = ctx.input(0).data<float>(), *k = ctx.input(1).data<float>(),
                *v = ctx.input(2).data<float>();
    float* y = ctx.output(0).data<float>();
    auto* packed_k = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(ctx.scratch()) + 63) &
                                              ~uintptr_t{63});
    float* packed_v = packed_k + layout.batches * layout.k_floats;
    float* tiles = packed_v + layout.batches * layout.v_floats;
    const int64_t blocks = (a.s + kQueryRows - 1) / kQueryRows;
    const int64_t mask_column = mask ? ms.back() : 0;
    // Kᵀ [d, s_kv] read from K [s_kv, d] (or as it is), the scale folded in; V [s_kv, dv].
    const int64_t kt_k = attrs_.k_transposed ? p.k.strides.end()[-2] : p.k.strides.back(),
                  kt_n = attrs_.k_transposed ? p.k.strides.back() : p.k.strides.end()[-2];
    const int64_t lda = p.q.strides.end()[-2], ldy = p.y_strides.end()[-2];
    const int64_t work = layout.batches * a.s * a.s_kv * (a.d + a.dv);
    const int64_t team =
        work >= (int64_t{1} << 15) ? std::min<int64_t>(ctx.threads(), layout.batches * blocks) : 1;
    if (takes_few_rows(p)) return run_few_rows(ctx, p, mask, tiles);
    parallel_team(team, [&](int64_t rank, int64_t size, auto barrier) {
      for (int64_t t = rank; t < 2 * layout.batches; t += size) {
        const int64_t b = t / 2;
        if (t % 2 == 0)
          pack_operand(k + ko[b], a.d, a.s_kv, kt_k, kt_n, attrs_.scale,
                       packed_k + b * layout.k_floats);
        else
          pack_operand(v + vo[b], a.s_kv, a.dv, p.v.strides.end()[-2], p.v.strides.back(), 1.0f,
                       packed_v + b * layout.v_floats);
      }
      barrier();
      float* tile = tiles + rank * layout.tile_floats;
      for (int64_t t = rank; t < layout.batches * blocks; t += size) {
        const int64_t b = t / blocks, r0 = t % blocks * kQueryRows,
                      rows = std::min(kQueryRows, a.s - r0);
        product_with_packed(q + qo[b] + r0 * lda, lda, rows, packed_k + b * layout.k_floats, a.d,
                            a.s_kv, tile, a.s_kv);
        if (mask)
          for (int64_t i = 0; i < rows; ++i) {
            float* row = tile + i * a.s_kv;
            const float* m = mask + mask_row(a, ms, b, r0 + i);
            if (mask_column == 1)
              for (int64_t j = 0; j < a.s_kv; ++j) row[j] += m[j];
            else
              for (int64_t j = 0; j < a.s_kv; ++j) row[j] += m[j * mask_column];
          }
        // (Normalized after the product: dv floats a row rather than s_kv.)
        float inv_sums[kQueryRows];
        exp_rows_f32(tile, rows, a.s_kv, a.s_kv, inv_sums);
        float* out = y + yo[b] + r0 * ldy;
        product_with_packed(tile, a.s_kv, rows, packed_v + b * layout.v_floats, a.s_kv, a.dv, out,
                            ldy);
        scale_rows(out, rows, a.dv, ldy, inv_sums);
      }
    });
  }

  // Each query row on its own: its scores from K's rows (or Kᵀ's), masked and normalized in
  // `tiles` (a row for each thread), then V's rows weighted into Y's row (takes_few_rows).
  void run_few_rows(RunContext& ctx, const Problem& p, const float* mask, float* tiles) const {
    const auto &qo = p.qo, &ko = p.ko, &vo = p.vo, &yo = p.yo, &ms = p.ms;
    const AttentionShapes& a = p.a;
    const float *q = ctx.input(0).data<float>(), *k = ctx.input(1).data<float>(),
                *v = ctx.input(2).data<float>();
    float* y = ctx.output(0).data<float>();
    const int64_t lda = p.q.strides.end()[-2], ldy = p.y_strides.end()[-2],
                  ldk = p.k.strides.end()[-2], ldv = p.v.strides.end()[-2];
    const int64_t mask_column = mask ? ms.back() : 0, rows = numel_of(a.batch) * a.s;
    const int64_t team = rows * a.s_kv * (a.d + a.dv) >= (int64_t{1} << 15)
                             ? std::min<int64_t>(ctx.threads(), rows)
                             : 1;
    parallel_team(team, [&](int64_t rank, int64_t size, auto) {
      float* scores = tiles + rank * a.s_kv;
      for (int64_t r = rank; r < rows; r += size) {
        const int64_t b = r / a.s, i = r % a.s;
        if (attrs_.k_transposed)
          scores_from_columns(q + qo[b] + i * lda, k + ko[b], ldk, a.s_kv, a.d, attrs_.scale,
                              scores);
        else
          scores_from_rows(q + qo[b] + i * lda, k + ko[b], ldk, a.s_kv, a.d, attrs_.scale, scores);
        if (mask) {
          const float* m = mask + mask_row(a, ms, b, i);
          for (int64_t j = 0; j < a.s_kv; ++j) scores[j] += m[j * mask_column];
        }
        float inv_sum;
        exp_rows_f32(scores, 1, a.s_kv, a.s_kv, &inv_sum);
        weighted_rows(scores, v + vo[b], ldv, a.s_kv, a.dv, y + yo[b] + i * ldy);
        scale_rows(y + yo[b] + i * ldy, 1, a.dv, ldy, &inv_sum);
      }
    });
  }

  AttentionAttributes attrs_;
  std::vector<int64_t> perm_q_, perm_k_, perm_v_, perm_y_;
};

}  // namespace

VOLT_REGISTER_KERNEL(attention, {.domain = kVoltDomain,
                                 .op = "Attention",
                                 .types = kFloatTypes,
                                 .create = make_kernel<Attention>});

}  // namespace volt
