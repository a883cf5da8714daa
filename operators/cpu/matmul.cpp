// MatMul and Gemm. f32/bf16 run on oneDNN's matmul primitive (constant weights reordered once
// per plan into the layout the primitive prefers); other dtypes on a reference loop. A MatMul
// may carry a fused epilogue (fuse_matmul_epilogue): bias (input 2), activation, residual
// (input 3), run as oneDNN bias and post-ops; and folded Transposes (fold_transpose_into_matmul:
// volt.perm_a, volt.perm_b, volt.perm_y), read and written through strided descriptors.
#include <bit>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "operators/common/cpu_isa.hpp"
#include "operators/common/dispatch.hpp"
#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/epilogue.hpp"
#include "operators/common/gemm_weights.hpp"
#include "operators/common/layout.hpp"
#include "operators/common/matmul_shapes.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/cpu/packed_product.hpp"
#include "operators/registry.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

// The Transposes folded into a MatMul (volt.perm_a, volt.perm_b, volt.perm_y) as Transpose
// resolves them: operand A is input 0 read through `a`, and so on; empty where none was folded.
struct FoldedTransposes {
  std::vector<int64_t> a, b, y;
  bool any() const { return !a.empty() || !b.empty() || !y.empty(); }
};

// The node's volt.perm_a, volt.perm_b and volt.perm_y as written, read once per kernel: a new
// shape resolves them against the operands' ranks without looking the attributes up again.
struct FoldedPermAttrs {
  explicit FoldedPermAttrs(const Node& n)
      : a(n.attr_ints("volt.perm_a")),
        b(n.attr_ints("volt.perm_b")),
        y(n.attr_ints("volt.perm_y")) {}
  std::vector<int64_t> a, b, y;
};

std::vector<int64_t> folded_perm(const std::vector<int64_t>& perm, size_t rank, const Node& n) {
  return perm.empty() ? perm : resolve_perm(perm, rank, n);
}

// The folded Transposes and the product's shapes (operands as read through theirs).
struct FoldedProduct {
  FoldedTransposes perms;
  MatMulShapes shapes;
  Shape y;  // as stored: the product's result through perms.y
};
FoldedProduct folded_product(const FoldedPermAttrs& attrs, const Node& n, const Shape& a,
                             const Shape& b) {
  FoldedProduct p;
  p.perms.a = folded_perm(attrs.a, a.size(), n);
  p.perms.b = folded_perm(attrs.b, b.size(), n);
  p.shapes = matmul_shapes(p.perms.a.empty() ? a : permuted_shape(a, p.perms.a),
                           p.perms.b.empty() ? b : permuted_shape(b, p.perms.b), n);
  p.perms.y = folded_perm(attrs.y, p.shapes.result.size(), n);
  p.y = p.perms.y.empty() ? p.shapes.result : permuted_shape(p.shapes.result, p.perms.y);
  return p;
}

// An operand's descriptor: the logical `dims` (rank-equalized, leading axes of size 1) of a
// row-major value of `stored` read through `perm`.
dnnl::memory::desc operand_md(const Shape& dims, const Shape& stored,
                              const std::vector<int64_t>& perm, dnnl::memory::data_type dt) {
  if (perm.empty()) return dnnl_adapter::plain_md(dims, dt);
  std::vector<int64_t> strides = permuted_strides(stored, perm);
  strides.insert(strides.begin(), dims.size() - stored.size(), numel_of(stored));
  return dnnl_adapter::strided_md(dims, strides, dt);
}

// Y's descriptor: logical `dims` written as a row-major value of dims permuted by `perm` (stored
// axis j is logical axis perm[j]).
dnnl::memory::desc result_md(const Shape& dims, const std::vector<int64_t>& perm,
                             dnnl::memory::data_type dt) {
  if (perm.empty()) return dnnl_adapter::plain_md(dims, dt);
  return dnnl_adapter::strided_md(dims, logical_strides(dims, perm), dt);
}

// The axes before the last of `dims` (a product's batch axes and its rows) as one axis of rows,
// where their strides allow it (each axis's stride its inner neighbour's times that one's size;
// axes of size 1 skipped): {rows, the stride of a row}; nothing where they do not.
std::optional<std::pair<int64_t, int64_t>> rows_as_one(const Shape& dims,
                                                       const std::vector<int64_t>& strides) {
  int64_t rows = 1, row_stride = -1, next = 0;
  for (size_t i = dims.size() - 1; i-- > 0;) {
    if (dims[i] == 1) continue;
    if (row_stride < 0)
      row_stride = strides[i];
    else if (strides[i] != next)
      return std::nullopt;
    next = strides[i] * dims[i];
    rows *= dims[i];
  }
  return std::pair{rows, row_stride < 0 ? dims.back() : row_stride};
}

template <class T>
void reference_matmul(const MatMulShapes& s, const T* a, const T* b, T* out) {
  using C = typename Compute<T>::type;
  const MatMulBatches batches(s);
#pragma omp parallel for if (batches.count() * s.m * s.n * s.k > 1 << 20)
  for (int64_t bi = 0; bi < batches.count(); ++bi) {
    int64_t oa, ob;
    batches.operands(bi, oa, ob);
    const T* pa = a + oa * s.m * s.k;
    const T* pb = b + ob * s.k * s.n;
    T* po = out + bi * s.m * s.n;
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        C acc = 0;
        for (int64_t p = 0; p < s.k; ++p)
          acc += static_cast<C>(pa[i * s.k + p]) * static_cast<C>(pb[p * s.n + j]);
        po[i * s.n + j] = static_cast<T>(acc);
      }
  }
}

class MatMulRef final : public Kernel {
 public:
  explicit MatMulRef(const Node& n)
      : perm_attrs_(n),
        act_(FusedActivation::of(n)),
        scale_(n.attr_float("volt.product_scale", 1.0f)) {}
  void infer(InferContext& ctx) const override {
    VOLT_CHECK(ctx.dtype(0) == ctx.dtype(1), InvalidModel,
               ctx.node().describe() + ": operands must share one dtype");
    const FoldedProduct p = folded_product(perm_attrs_, ctx.node(), ctx.shape(0), ctx.shape(1));
    check_epilogue(ctx, p.shapes.result);
    ctx.set_output(0, ctx.dtype(0), p.y);
  }
  void run(RunContext& ctx) const override {
    // Folded Transposes: the operands transposed first, Y written transposed after.
    const FoldedProduct p =
        folded_product(perm_attrs_, ctx.node(), ctx.input(0).shape(), ctx.input(1).shape());
    const Tensor a = p.perms.a.empty() ? ctx.input(0) : permuted(ctx.input(0), p.perms.a);
    const Tensor b = p.perms.b.empty() ? ctx.input(1) : permuted(ctx.input(1), p.perms.b);
    Tensor y = p.perms.y.empty() ? ctx.output(0) : allocate_tensor(a.dtype(), p.shapes.result);
    dispatch_numeric(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, bool>)
        ctx.error("does not apply to bool");
      else
        reference_matmul<T>(p.shapes, static_cast<const T*>(a.raw()),
                            static_cast<const T*>(b.raw()), static_cast<T*>(y.raw()));
      if constexpr (std::is_floating_point_v<typename Compute<T>::type>) {
        T* py = static_cast<T*>(y.raw());
        if (scale_ != 1.0f)
          for (int64_t i = 0; i < y.numel(); ++i)
            py[i] = static_cast<T>(static_cast<typename Compute<T>::type>(py[i]) * scale_);
      }
    });
    apply_epilogue(y, ctx.has_input(2) ? &ctx.input(2) : nullptr, act_,
                   ctx.has_input(3) ? &ctx.input(3) : nullptr, ctx.node());
    if (!p.perms.y.empty()) permute_into(y, p.perms.y, ctx.output(0));
  }

 private:
  FoldedPermAttrs perm_attrs_;
  FusedActivation act_;
  float scale_;  // volt.product_scale
};

// --- oneDNN
// ----------------------------------------------------------------------------------------
// What a product needs whatever its operands' shapes: the primitive, the weights' layout (packed
// once when constant), the bias and scratchpad descriptors. In a shape-generic plan one serves
// every shape (the node's memo keeps it), so that a new shape copies nothing of it.
struct MatMulPrimitive {
  dnnl::matmul prim;
  dnnl::memory::desc b, bias, scratch;
  Tensor packed_b;  // weights reordered once, when constant
  bool has_bias = false;
};

// A product [rows, K] x [K, N] with 2-D weights run as the pointwise convolution it is: rows
// pixels of K channels each, stored channels-last, which is how A and Y lie (no copy of either).
// Without AVX-512, oneDNN 2.6's matmul has only its gemm, whose jit kernels pack A at every call
// and whose code (17-30 ms) is made at the process's first product; its 1x1 convolution kernel
// runs the same products faster (AVX2 EPYC, 2 threads; a oneDNN-only benchmark, 128 x 768 x 768
// and 128 x 3072 x 768: 106 -> 140 and 118 -> 154 GFLOP/s; `volt bench --profile` of BERT-base
// at batch 1, its projections: 143 -> 130 ms a run; `bench/compare.py`: DLRM b256 0.94-1.01 ->
// 0.77-0.78 x ORT, the MLP b64 0.60-0.77 -> 0.47-0.53, the LeNet-style CNN's load + first run
// 47-64 -> 25-34 ms, no gemm code made). Plans for one shape only: a convolution's code is made
// per shape.
struct ConvRoute {
  dnnl::convolution_forward prim;
  dnnl::memory::desc src, weights, bias, dst, scratch;
  Tensor packed_weights;  // constant weights, packed once
  // Or computed ones (a trainer's: its inference graph reads them as inputs), packed at each run
  // into the scratch at `pack_at`: the same kernel on the same packed layout as a session on the
  // exported model, so that the two give the same bits.
  std::optional<dnnl_adapter::PreparedReorder> pack;
  size_t pack_at = 0;
  bool has_bias = false, residual = false;
  int residual_at = 0;  // the residual's post-op
};

struct MatMulState {
  std::shared_ptr<const MatMulPrimitive> p;
  std::shared_ptr<const ConvRoute> conv;        // or the product as a convolution (ConvRoute)
  std::shared_ptr<const PackedProduct> packed;  // or on packed weights (packed_product.hpp)
  // Or, two computed operands in a plan for several shapes, on the packed kernel with B packed
  // at each run (packed_product.hpp).
  std::shared_ptr<const ComputedProduct> computed;
  dnnl::memory::desc a, b, out;  // this shape's (b: the primitive's layout when packed)
  bool sum = false;  // a sum post-op adds the residual the output holds before the product
  // Operands (and Y) the primitive reads in another layout or type than the graph holds them:
  // bf16 arithmetic on an fp32 A, and folded Transposes oneDNN has only its reference kernel
  // for (ConvNeXt's channels-first to channels-last), copied by a prepared reorder into the
  // scratch at the offset (Y out of it).
  struct Staged {
    // (Behind a pointer: most products stage nothing, and a plan for a new input shape holds a
    // state per product; a PreparedReorder is 1.4 KB of descriptors.)
    std::unique_ptr<const dnnl_adapter::PreparedReorder> copy;
    size_t offset = 0;
  } stage_a, stage_b, stage_y;
};

// The descriptors a matmul primitive is made on, for operands `a`, `b`, `out` (`b` constant
// when `b_const`: its layout left to the primitive). Shape generic: the rows of A, and every
// dimension of a non-constant B that it shares with A (not broadcast), left to run time, so that
// the primitive oneDNN caches for the first shape serves every later one and a new shape costs no
// code generation. (On AVX2 both forms run oneDNN's gemm; with AVX-512 the fixed form may get its
// brgemm kernels, which is why a session's first shape keeps it.)
struct ProductDescs {
  dnnl::memory::desc a, b, out;
};
// Which dimensions of A, B and Y the shape-generic form leaves to run time (bit i: dimension i).
struct RuntimeDims {
  uint32_t a = 0, b = 0, out = 0;
};
RuntimeDims runtime_dims(const dnnl::memory::desc& a, const dnnl::memory::desc& b, bool b_const) {
  RuntimeDims r;
  const int rank = a.data.ndims;
  for (int i = 0; i + 2 < rank; ++i)
    if (!b_const && a.data.dims[i] == b.data.dims[i]) {
      r.a |= 1u << i;
      r.b |= 1u << i;
      r.out |= 1u << i;
    }
  r.a |= 1u << (rank - 2);
  r.out |= 1u << (rank - 2);
  if (!b_const) {
    r.a |= 1u << (rank - 1);
    r.b |= 3u << (rank - 2);
    r.out |= 1u << (rank - 1);
  }
  return r;
}
// A's rows in this plan's shape (every dimension but the last).
int64_t rows_of(const dnnl::memory::desc& a) {
  const auto d = a.dims();
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < d.size(); ++i) rows *= d[i];
  return rows;
}

ProductDescs product_descs(const dnnl::memory::desc& a, const dnnl::memory::desc& b,
                           const dnnl::memory::desc& out, bool b_const,
                           dnnl::memory::data_type weights_dt, bool shape_generic) {
  if (!shape_generic) return {a, b_const ? packed_weights_md(b, weights_dt, rows_of(a)) : b, out};
  const RuntimeDims r = runtime_dims(a, b, b_const);
  return {dnnl_adapter::with_runtime_dims(a, r.a),
          b_const ? packed_weights_md(b, weights_dt, rows_of(a))
                  : dnnl_adapter::with_runtime_dims(b, r.b),
          dnnl_adapter::with_runtime_dims(out, r.out)};
}
dnnl::matmul::primitive_desc matmul_pd(const ProductDescs& p, const dnnl::memory::desc* bias,
                                       const dnnl::primitive_attr& attr) {
  const auto d =
      bias ? dnnl::matmul::desc(p.a, p.b, *bias, p.out) : dnnl::matmul::desc(p.a, p.b, p.out);
  return dnnl::matmul::primitive_desc(d, attr, dnnl_adapter::engine());
}

// Builds the primitive; `b_const` (may be null; input 1 of the node) is reordered into the
// primitive's layout. `shape_generic`: see product_descs; the state keeps this shape's
// descriptors, which the run executes on.
std::shared_ptr<MatMulState> make_matmul(
    const Node& node, const dnnl::memory::desc& a, const dnnl::memory::desc& b,
    const dnnl::memory::desc& out, const dnnl::memory::desc* bias, const Tensor* b_const,
    float alpha, InferContext& ctx, const dnnl::post_ops* ops = nullptr,
    dnnl::memory::data_type weights_dt = dnnl::memory::data_type::undef, bool* reference = nullptr,
    bool shape_generic = false) {
  return dnnl_adapter::guarded(node, [&] {
    if (weights_dt == dnnl::memory::data_type::undef) weights_dt = b.data_type();
    // The generic form where the bias is one row of fixed width, and where oneDNN's gemm takes
    // the operands' strides for any shape (only its reference kernel accepts some).
    if (bias) {
      const auto bd = bias->dims();
      for (size_t i = 0; i + 1 < bd.size(); ++i) shape_generic = shape_generic && bd[i] == 1;
      shape_generic = shape_generic && b_const;
    }
    auto st = std::make_shared<MatMulState>();
    st->a = a;
    st->out = out;
    // The node's generic primitive, made for an earlier shape, is taken as it is: only the
    // descriptors of this shape, which the run executes on, are this plan's. (Looked up by the
    // generic descriptors' bytes, written without making them: a new shape plans every product.)
    std::string key;
    if (shape_generic && ctx.memo()) {
      const RuntimeDims r = runtime_dims(a, b, b_const);
      dnnl_adapter::append_md_key(key, a, r.a);
      if (b_const)
        dnnl_adapter::append_md_key(key, packed_weights_md(b, weights_dt, rows_of(a)));
      else
        dnnl_adapter::append_md_key(key, b, r.b);
      dnnl_adapter::append_md_key(key, out, r.out);
      if (bias) dnnl_adapter::append_md_key(key, *bias);
      const int64_t words[] = {
          static_cast<int64_t>(weights_dt), ops ? ops->len() : 0,
          static_cast<int64_t>(std::bit_cast<uint32_t>(alpha)),
          static_cast<int64_t>(reinterpret_cast<uintptr_t>(b_const ? b_const->raw() : nullptr))};
      key.append(reinterpret_cast<const char*>(words), sizeof words);
      if (auto kept = std::static_pointer_cast<const MatMulPrimitive>(ctx.memo()->find(key))) {
        st->p = std::move(kept);
        st->b = b_const ? st->p->b : b;
        ctx.request_scratch(st->p->scratch.get_size());
        return st;
      }
    }
    const ProductDescs descs = product_descs(a, b, out, b_const, weights_dt, shape_generic);
    auto p = std::make_shared<MatMulPrimitive>();
    if (bias) {
      p->bias = *bias;
      p->has_bias = true;
    }
    dnnl::primitive_attr attr = dnnl_adapter::scratch_attr();
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (ops) attr.set_post_ops(*ops);
    std::optional<dnnl::matmul::primitive_desc> generic;
    if (shape_generic) try {
        generic = matmul_pd(descs, bias, attr);
        if (dnnl_adapter::is_reference(*generic)) generic.reset();
      } catch (const dnnl::error&) {
      }
    auto pd = generic
                  ? *generic
                  : matmul_pd(shape_generic ? product_descs(a, b, out, b_const, weights_dt, false)
                                            : descs,
                              bias, attr);
    if (dnnl_adapter::is_reference(pd)) {
      if (reference) {
        *reference = true;
        st->p = std::move(p);
        return st;
      }
      ctx.runs_reference_loop(std::string("oneDNN ") + pd.impl_info_str());
    }
    p->prim = dnnl::matmul(pd);
    p->b = pd.weights_desc();
    p->scratch = pd.scratchpad_desc();
    if (b_const) p->packed_b = dnnl_adapter::pack_constant(ctx, 1, *b_const, b, p->b);
    st->b = b_const ? p->b : b;
    ctx.request_scratch(p->scratch.get_size());
    if (generic && ctx.memo()) ctx.memo()->keep(key, p);
    st->p = std::move(p);
    return st;
  });
}

void run_matmul(const MatMulState& st, RunContext& ctx, const void* a, const void* b,
                const void* bias, void* out) {
  const MatMulPrimitive& p = *st.p;
  dnnl_adapter::Args args = {{DNNL_ARG_SRC, st.a, a},
                             {DNNL_ARG_WEIGHTS, st.b, p.packed_b.defined() ? p.packed_b.raw() : b},
                             {DNNL_ARG_DST, st.out, out}};
  if (p.has_bias) args.add(DNNL_ARG_BIAS, p.bias, bias);
  dnnl_adapter::execute(p.prim, args, p.scratch, ctx.scratch());
}

// The route for A [rows, K] (rows of K floats) times weights (k, n) at k `k_stride` + n
// `n_stride` (`w` where constant, else null: input 1 at each run) into Y [rows, N], with the bias
// (N floats), the activation and a residual of Y's shape (`sum`); null where oneDNN's 1x1 kernel
// does not take it (then its other convolutions are no faster than the matmul).
std::shared_ptr<const ConvRoute> plan_conv_route(InferContext& ctx, int64_t rows, int64_t k,
                                                 int64_t n, const Tensor* w, int64_t k_stride,
                                                 int64_t n_stride, bool has_bias,
                                                 const FusedActivation& act, bool sum) {
  return dnnl_adapter::guarded(ctx.node(), [&]() -> std::shared_ptr<const ConvRoute> {
    using tag = dnnl::memory::format_tag;
    constexpr auto f32 = dnnl::memory::data_type::f32;
    auto r = std::make_shared<ConvRoute>();
    r->src = dnnl::memory::desc({1, k, 1, rows}, f32, tag::acdb);
    r->dst = dnnl::memory::desc({1, n, 1, rows}, f32, tag::acdb);
    const dnnl::memory::desc any_weights({n, k, 1, 1}, f32, tag::any);
    // The bias as a binary post-op, added to the finished sum as the matmul adds it (a
    // convolution's own bias starts the sum: other bits than a trainer's graph, whose MatMul and
    // Add run apart), then the activation and the residual.
    dnnl::post_ops ops;
    r->has_bias = has_bias;
    if (has_bias) {
      r->bias = dnnl_adapter::plain_md({1, n, 1, 1}, f32);
      ops.append_binary(dnnl::algorithm::binary_add, r->bias);
    }
    act.append_to(ops);
    // (The residual as a second binary post-op: oneDNN's 1x1 kernels take a sum post-op only
    // first, which would add it before the bias.)
    r->residual = sum;
    r->residual_at = ops.len();
    if (sum) ops.append_binary(dnnl::algorithm::binary_add, r->dst);
    dnnl::primitive_attr attr = dnnl_adapter::scratch_attr();
    attr.set_post_ops(ops);
    const dnnl::memory::dims unit = {1, 1}, none = {0, 0};
    constexpr auto inference = dnnl::prop_kind::forward_inference;
    constexpr auto direct = dnnl::algorithm::convolution_direct;
    const dnnl::convolution_forward::desc d(inference, direct, r->src, any_weights, r->dst, unit,
                                            none, none);
    const dnnl::convolution_forward::primitive_desc pd(d, attr, dnnl_adapter::engine());
    if (std::string(pd.impl_info_str()).find("jit_1x1") == std::string::npos) return nullptr;
    r->prim = dnnl::convolution_forward(pd);
    r->weights = pd.weights_desc();
    r->scratch = pd.scratchpad_desc();
    // W as the convolution's [N, K, 1, 1]: output channel n of input channel k.
    const dnnl::memory::desc as_stored =
        dnnl_adapter::strided_md({n, k, 1, 1}, {n_stride, k_stride, k * n, k * n}, f32);
    if (w) {
      r->packed_weights = dnnl_adapter::pack_constant(ctx, 1, *w, as_stored, r->weights);
      ctx.request_scratch(r->scratch.get_size());
    } else {
      r->pack.emplace(as_stored, r->weights);
      r->pack_at = dnnl_adapter::align64(r->scratch.get_size());
      ctx.request_scratch(r->pack_at + r->weights.get_size());
    }
    return r;
  });
}

// Whether this plan of the node may take the ConvRoute: without AVX-512, in a plan for one shape
// (a convolution's code is made per shape) of a graph whose inputs fix their dimensions past the
// first (else the first new shape rebuilt every weight the route had packed: gpt2_step's first
// new past 2.4 -> 9.2 x its steady run) and that no plan of the node for several shapes
// preceded. A plan specialized later to a shape those ran keeps their matmul, so that the runs
// at one shape give the same bits before and after specializing.
bool conv_route_allowed(InferContext& ctx) {
  if (cpu_has_avx512()) return false;
  static const std::string kGenericPlanned = "matmul: planned for several shapes";
  NodeMemo* memo = ctx.memo();
  if (ctx.shapes_vary()) {
    if (memo && !memo->find(kGenericPlanned)) memo->keep(kGenericPlanned, std::make_shared<bool>());
    return false;
  }
  return !ctx.shapes_may_vary() && !(memo && memo->find(kGenericPlanned));
}

void run_conv_route(const ConvRoute& r, RunContext& ctx, const void* a, const void* w,
                    const void* bias, const void* residual, void* out) {
  const void* packed = r.packed_weights.defined() ? r.packed_weights.raw() : nullptr;
  if (r.pack) {
    void* into = static_cast<char*>(ctx.scratch()) + r.pack_at;
    (*r.pack)(w, into);
    packed = into;
  }
  dnnl_adapter::Args args = {
      {DNNL_ARG_SRC, r.src, a}, {DNNL_ARG_WEIGHTS, r.weights, packed}, {DNNL_ARG_DST, r.dst, out}};
  if (r.has_bias) args.add(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, r.bias, bias);
  if (r.residual)
    args.add(DNNL_ARG_ATTR_MULTIPLE_POST_OP(r.residual_at) | DNNL_ARG_SRC_1, r.dst, residual);
  dnnl_adapter::execute(r.prim, args, r.scratch, ctx.scratch());
}

class DnnlMatMul final : public Kernel {
 public:
  explicit DnnlMatMul(const Node& n)
      : perm_attrs_(n),
        act_(FusedActivation::of(n)),
        bf16_(n.attr_string("volt.compute", "") == "bf16"),
        scale_(n.attr_float("volt.product_scale", 1.0f)) {}
  void infer(InferContext& ctx) const override {
    if (ctx.dtype(0) != ctx.dtype(1)) throw KernelUnsupported{"mixed dtypes"};
    const Shape &a0 = ctx.shape(0), &b0 = ctx.shape(1);
    const FoldedProduct p = folded_product(perm_attrs_, ctx.node(), a0, b0);
    const MatMulShapes& s = p.shapes;
    if (s.out.size() > 6 || numel_of(s.out) == 0 || s.k == 0) throw KernelUnsupported{"shape"};
    // Folded Transposes need both operands' matrices as they are (no 1-D operand).
    if (p.perms.any() && (a0.size() < 2 || b0.size() < 2)) throw KernelUnsupported{"1-D operand"};
    check_epilogue(ctx, s.result);
    ctx.set_output(0, ctx.dtype(0), p.y);
    // B shared by every batch (a linear layer): one [batch·M, K] × [K, N] product, which lets
    // oneDNN pack B and block over all rows at once.
    const bool b_shared = numel_of(Shape(s.b.begin(), s.b.end() - 2)) == 1 && s.a.size() > 2;
    // (First: a new shape plans such products without a descriptor of oneDNN's.)
    if (auto computed = computed_product(ctx, p, a0, b0, b_shared)) {
      auto st = std::make_shared<MatMulState>();
      ctx.request_scratch(computed_product_scratch(*computed));
      st->computed = std::move(computed);
      return ctx.set_state(st);
    }
    Shape a = s.a, b = s.b, out = s.out;
    if (!p.perms.any() && b_shared) {
      a = {numel_of(s.a) / s.k, s.k};
      b = {s.k, s.n};
      out = {a[0], s.n};
    }
    const bool sum = ctx.has_input(3) && ctx.shape(3) == s.result;
    // bf16 arithmetic (precision = bf16) needs the weights constant: they are converted once.
    const Tensor* b_const = ctx.input_tensor(1);
    const bool bf16 = bf16_ && ctx.dtype(0) == DType::Float && b_const;
    // Rows of A times one row-major [K, N] matrix in fp32, without a scale: the routes below take
    // such products (ConvRoute without AVX-512, the packed kernel with it).
    const bool rows_times_matrix = !bf16 && !p.perms.any() && ctx.dtype(0) == DType::Float &&
                                   scale_ == 1.0f && a.size() == 2 && out.size() == 2 &&
                                   numel_of(b0) == s.k * s.n;
    // (Before any descriptor or post-op of oneDNN's is made, which a new shape would otherwise
    // pay for: a fifth of a text classifier's projection's planning.)
    if (rows_times_matrix && b_const && packed_product_suits(ctx, s.k, s.n, act_) &&
        (!ctx.has_input(2) || numel_of(ctx.shape(2)) == s.n)) {
      auto st = std::make_shared<MatMulState>();
      st->packed =
          plan_packed_product(ctx, *b_const, s.k, s.n, s.n, 1, ctx.has_input(2), act_, sum);
      st->sum = sum;
      return ctx.set_state(st);
    }
    const auto dt = dnnl_adapter::to_dnnl(ctx.dtype(0));
    // The same through folded Transposes, where A's and Y's strides let their batch axes and
    // rows run as one axis: a decoder's cross-attention projects its memory [B, S, D] read as
    // [S, B, D] (a Transpose folded in), which ran as S products of one row each (DETR's
    // decoder at batch 1: 10 ms a projection, ORT 0.4).
    std::optional<dnnl::memory::desc> a_rows, b_rows, y_rows;
    if (p.perms.any() && b_shared && (p.perms.b.empty() || b0.size() == 2)) {
      const Shape pa = p.perms.a.empty() ? a0 : permuted_shape(a0, p.perms.a);
      const std::vector<int64_t> ast =
          p.perms.a.empty() ? strides_of(a0) : permuted_strides(a0, p.perms.a);
      const std::vector<int64_t> yst = logical_strides(s.result, p.perms.y);
      const auto ar = rows_as_one(pa, ast), yr = rows_as_one(s.result, yst);
      if (ar && yr && ar->first == yr->first) {
        a = {ar->first, s.k};
        b = {s.k, s.n};
        out = {ar->first, s.n};
        a_rows = dnnl_adapter::strided_md(a, {ar->second, ast.back()}, dt);
        const std::vector<int64_t> bst =
            p.perms.b.empty() ? strides_of(b0) : permuted_strides(b0, p.perms.b);
        b_rows = dnnl_adapter::strided_md(b, {bst[bst.size() - 2], bst.back()}, dt);
        y_rows = dnnl_adapter::strided_md(out, {yr->second, yst.back()}, dt);
      }
    }
    dnnl::memory::desc bias_md;
    if (ctx.has_input(2)) {
      Shape bs(out.size(), 1);
      bs.back() = s.n;
      bias_md = dnnl_adapter::plain_md(bs, dt);
    }
    dnnl::post_ops ops;
    act_.append_to(ops);
    if (sum) ops.append_sum(1.0f);
    const auto cdt = bf16 ? dnnl::memory::data_type::bf16 : dt;
    if (conv_route_allowed(ctx) && rows_times_matrix)  // (it marks generic plans)
      if (auto conv =
              plan_conv_route(ctx, a[0], s.k, s.n, b_const, s.n, 1, ctx.has_input(2), act_, sum)) {
        auto st = std::make_shared<MatMulState>();
        st->conv = std::move(conv);
        st->sum = sum;
        return ctx.set_state(st);
      }
    // The graph's tensors as the product reads them: folded Transposes as strided descriptors.
    const dnnl::memory::desc a_md = a_rows ? *a_rows : operand_md(a, a0, p.perms.a, dt),
                             b_md = b_rows ? *b_rows : operand_md(b, b0, p.perms.b, dt),
                             y_md = y_rows ? *y_rows : result_md(out, p.perms.y, dt);
    // In a plan for several shapes, a computed B read transposed (its rows' elements not
    // adjacent: attention's K^T, a Transpose folded in) is staged as plain rows, and the product
    // reads those. oneDNN's gemm, given the transposed B at run time, packs it at every call into
    // a buffer it allocates, 64-byte aligned, on each thread; glibc then serves each call's buffer
    // past the last one on the worker thread (the aligned allocation's leftovers sit in its
    // per-thread cache, so the freed buffer never merges back) and every call faults fresh
    // pages: the text classifier's Q K^T took 56-71 us at 116 tokens there against 12 us in the
    // plan for that one shape, and runs at 170 tokens faulted 63-74 pages each in a Python
    // process; on plain rows, 18-21 us and no fault.
    const bool gather_b = ctx.shapes_vary() && !b_const && !bf16 && ctx.dtype(1) == DType::Float &&
                          !b_rows && b_md.data.format_desc.blocking.strides[b.size() - 1] != 1;
    // The primitive on those; where oneDNN has only its reference kernel for their strides, on
    // plain copies (constant weights are packed from their strides either way).
    auto build = [&](bool strided, bool* reference) {
      return make_matmul(ctx.node(), strided && !bf16 ? a_md : dnnl_adapter::plain_md(a, cdt),
                         (strided && !gather_b) || b_const ? b_md : dnnl_adapter::plain_md(b, dt),
                         strided ? y_md : dnnl_adapter::plain_md(out, dt),
                         ctx.has_input(2) ? &bias_md : nullptr, b_const, scale_, ctx, &ops, cdt,
                         reference, ctx.shapes_vary() && !bf16);
    };
    bool reference = false;
    auto st = build(true, p.perms.any() ? &reference : nullptr);
    if (reference) st = build(false, nullptr);
    st->sum = sum;
    size_t bytes = st->p->scratch.get_size();
    auto stage = [&](MatMulState::Staged& staged, const dnnl::memory::desc& graph,
                     const dnnl::memory::desc& primitive, bool into_primitive) {
      if (graph == primitive) return;
      // In plans for several shapes, fp32 copied into plain rows by volt's gather: no reorder
      // made for each shape.
      const bool gather =
          into_primitive && ctx.shapes_vary() &&
          graph.data_type() == dnnl::memory::data_type::f32 &&
          primitive.data_type() == dnnl::memory::data_type::f32 &&
          graph.data.format_kind == dnnl_blocked &&
          primitive == dnnl_adapter::plain_md(primitive.dims(), primitive.data_type());
      staged.copy = dnnl_adapter::guarded(ctx.node(), [&] {
        const auto& strides = graph.data.format_desc.blocking.strides;
        return std::make_unique<const dnnl_adapter::PreparedReorder>(
            gather
                ? dnnl_adapter::PreparedReorder::gather(
                      primitive.dims(), std::vector<int64_t>(strides, strides + graph.data.ndims))
            : into_primitive ? dnnl_adapter::PreparedReorder(graph, primitive)
                             : dnnl_adapter::PreparedReorder(primitive, graph));
      });
      staged.offset = dnnl_adapter::align64(bytes);
      bytes = staged.offset + primitive.get_size();
    };
    stage(st->stage_a, a_md, st->a, true);
    if (!b_const) stage(st->stage_b, b_md, st->b, true);
    stage(st->stage_y, y_md, st->out, false);
    ctx.request_scratch(bytes);
    ctx.set_state(st);
  }
  void run(RunContext& ctx) const override {
    const auto& st = ctx.state<MatMulState>();
    Tensor& y = ctx.output(0);
    if (st.computed)
      return run_computed_product(*st.computed, static_cast<const float*>(ctx.input(0).raw()),
                                  static_cast<const float*>(ctx.input(1).raw()),
                                  static_cast<float*>(y.raw()), ctx.scratch(), ctx.threads());
    if (st.packed || st.conv) {  // (they read a residual of Y's shape where it lies)
      const void* bias = ctx.has_input(2) ? ctx.input(2).raw() : nullptr;
      const void* residual = st.sum ? ctx.input(3).raw() : nullptr;
      if (st.packed)
        run_packed_product(*st.packed, static_cast<const float*>(ctx.input(0).raw()),
                           numel_of(y.shape()) / st.packed->n, static_cast<const float*>(bias),
                           static_cast<const float*>(residual), static_cast<float*>(y.raw()),
                           ctx.threads());
      else
        run_conv_route(*st.conv, ctx, ctx.input(0).raw(), ctx.input(1).raw(), bias, residual,
                       y.raw());
      if (ctx.has_input(3) && !st.sum)  // a broadcast residual, added after the activation
        apply_epilogue(y, nullptr, FusedActivation{}, &ctx.input(3), ctx.node());
      return;
    }
    if (st.sum) std::memcpy(y.raw(), ctx.input(3).raw(), y.nbytes());
    char* scratch = static_cast<char*>(ctx.scratch());
    auto in = [&](const MatMulState::Staged& staged, const Tensor& t) -> const void* {
      if (!staged.copy) return t.raw();
      (*staged.copy)(t.raw(), scratch + staged.offset);
      return scratch + staged.offset;
    };
    const void* a = in(st.stage_a, ctx.input(0));
    const void* b = in(st.stage_b, ctx.input(1));
    void* out = st.stage_y.copy ? scratch + st.stage_y.offset : y.raw();
    run_matmul(st, ctx, a, b, ctx.has_input(2) ? ctx.input(2).raw() : nullptr, out);
    if (st.stage_y.copy) (*st.stage_y.copy)(out, y.raw());
    if (ctx.has_input(3) && !st.sum)  // a broadcast residual, added after the activation
      apply_epilogue(y, nullptr, FusedActivation{}, &ctx.input(3), ctx.node());
  }

 private:
  // Two computed fp32 operands without an epilogue, in a plan for several shapes, where A's rows
  // and Y's rows have their elements adjacent (through any folded Transposes): the product on
  // the packed kernel (ComputedProduct); null where it does not apply.
  std::shared_ptr<const ComputedProduct> computed_product(const InferContext& ctx,
                                                          const FoldedProduct& p, const Shape& a0,
                                                          const Shape& b0, bool b_shared) const {
    if (!computed_product_suits(ctx) || ctx.input_tensor(1) || ctx.has_input(2) ||
        ctx.has_input(3) || act_.kind != FusedActivation::Kind::None ||
        ctx.dtype(0) != DType::Float || a0.size() < 2 || b0.size() < 2)
      return nullptr;
    const MatMulShapes& s = p.shapes;
    const std::vector<int64_t> a_st = p.perms.a.empty() ? strides_of(a0)
                                                        : permuted_strides(a0, p.perms.a),
                               b_st = p.perms.b.empty() ? strides_of(b0)
                                                        : permuted_strides(b0, p.perms.b),
                               y_st = logical_strides(s.result, p.perms.y);
    const size_t rank = s.out.size(), ar = a_st.size(), br = b_st.size();
    if (y_st.size() != rank || (a_st[ar - 1] != 1 && s.k > 1) || (y_st[rank - 1] != 1 && s.n > 1))
      return nullptr;
    // (B shared by several batches, a linear layer on computed weights: oneDNN's one product
    // over all the rows, where the rows allow it, rather than a packing of B per batch.)
    if (b_shared && numel_of(Shape(s.out.begin(), s.out.end() - 2)) > 1) return nullptr;
    auto c = std::make_shared<ComputedProduct>();
    c->m = s.m;
    c->k = s.k;
    c->n = s.n;
    c->scale = scale_;
    c->lda = a_st[ar - 2];
    c->ldy = y_st[rank - 2];
    c->b_k = b_st[br - 2];
    c->b_n = b_st[br - 1];
    c->batch.assign(s.out.begin(), s.out.end() - 2);
    // (The operands' axes counted from the last: a lower rank's missing axes are broadcast.)
    auto batch_stride = [](const std::vector<int64_t>& st, const Shape& dims, size_t i,
                           size_t rank) -> int64_t {
      const size_t missing = rank - st.size();
      return i < missing || dims[i] == 1 ? 0 : st[i - missing];
    };
    for (size_t i = 0; i + 2 < rank; ++i) {
      c->a_batch.push_back(batch_stride(a_st, s.a, i, rank));
      c->b_batch.push_back(batch_stride(b_st, s.b, i, rank));
      c->y_batch.push_back(s.out[i] == 1 ? 0 : y_st[i]);
    }
    return c;
  }

  FoldedPermAttrs perm_attrs_;
  FusedActivation act_;
  bool bf16_;    // fp32 tensors, bf16 arithmetic (precision = bf16)
  float scale_;  // volt.product_scale: oneDNN's output scale (the pass gives it no bias)
};

// --- Gemm: Y = alpha * A' B' + beta * C
// -------------------------------------------------------------
struct GemmDims {
  int64_t m, k, n;
};

GemmDims gemm_dims(const Shape& a, const Shape& b, bool ta, bool tb, const Node& node) {
  VOLT_CHECK(
      a.size() == 2 && b.size() == 2, InvalidArgument,
      node.describe() + ": A and B must be 2-D, got " + shape_str(a) + " and " + shape_str(b));
  GemmDims d{ta ? a[1] : a[0], ta ? a[0] : a[1], tb ? b[0] : b[1]};
  VOLT_CHECK(
      (tb ? b[1] : b[0]) == d.k, InvalidArgument,
      node.describe() + ": shapes " + shape_str(a) + " and " + shape_str(b) + " do not multiply");
  return d;
}

class Gemm final : public Kernel {
 public:
  explicit Gemm(const Node& n)
      : ta_(n.attr_int("transA", 0) != 0),
        tb_(n.attr_int("transB", 0) != 0),
        alpha_(n.attr_float("alpha", 1)),
        beta_(n.attr_float("beta", 1)),
        legacy_broadcast_(n.opset < 7),
        act_(FusedActivation::of(n)) {}

  void infer(InferContext& ctx) const override {
    const GemmDims d = gemm_dims(ctx.shape(0), ctx.shape(1), ta_, tb_, ctx.node());
    const Shape out{d.m, d.n};
    if (ctx.has_input(2)) broadcast_shapes({out, ctx.shape(2)}, ctx.node());
    ctx.set_output(0, ctx.dtype(0), out);
    if (!dnnl_adapter::supported(ctx.dtype(0)) || ctx.dtype(0) != DType::Float || d.k == 0 ||
        d.m == 0 || d.n == 0)
      return;
    const Shape& as = ctx.shape(0);
    const Shape& bs = ctx.shape(1);
    // C as the product's bias: a row of N (or, below, C of the result's shape).
    const bool unscaled = alpha_ == 1.0f && beta_ == 1.0f;
    const bool bias_row =
        ctx.has_input(2) && unscaled && numel_of(ctx.shape(2)) == d.n &&
        (ctx.shape(2).size() == 1 || (ctx.shape(2).size() == 2 && ctx.shape(2)[0] == 1));
    // A linear layer's product (C absent or its bias) on packed weights in a plan for several
    // shapes with AVX-512 (before any descriptor of oneDNN's is made, which a new shape would
    // otherwise pay for), or as a 1x1 convolution without it (ConvRoute).
    const bool linear_layer = !ta_ && alpha_ == 1.0f && (!ctx.has_input(2) || bias_row);
    if (linear_layer && ctx.input_tensor(1) && packed_product_suits(ctx, d.k, d.n, act_)) {
      auto st = std::make_shared<MatMulState>();
      st->packed = plan_packed_product(ctx, *ctx.input_tensor(1), d.k, d.n, tb_ ? 1 : bs[1],
                                       tb_ ? bs[1] : 1, bias_row, act_, false);
      return ctx.set_state(st);
    }
    const auto dt = dnnl_adapter::to_dnnl(ctx.dtype(0));
    // Transposes are strides, not copies.
    const auto a_md = dnnl_adapter::strided_md(
        {d.m, d.k}, ta_ ? std::vector<int64_t>{1, as[1]} : std::vector<int64_t>{as[1], 1}, dt);
    const auto b_md = dnnl_adapter::strided_md(
        {d.k, d.n}, tb_ ? std::vector<int64_t>{1, bs[1]} : std::vector<int64_t>{bs[1], 1}, dt);
    dnnl::memory::desc bias_md;
    const dnnl::memory::desc* bias = nullptr;
    if (bias_row)
      bias_md = dnnl_adapter::plain_md({1, d.n}, dt);
    else if (ctx.has_input(2) && unscaled && ctx.shape(2) == out)
      bias_md = dnnl_adapter::plain_md(out, dt);
    if (bias_md.get_size() > 0) bias = &bias_md;
    // A fused activation is a post-op when C is the primitive's bias (or absent); otherwise it
    // follows the separate C addition in run().
    dnnl::post_ops ops;
    if (bias || !ctx.has_input(2)) act_.append_to(ops);
    if (conv_route_allowed(ctx) && linear_layer) {
      if (auto conv = plan_conv_route(ctx, d.m, d.k, d.n, ctx.input_tensor(1), tb_ ? 1 : bs[1],
                                      tb_ ? bs[1] : 1, bias != nullptr, act_, false)) {
        auto st = std::make_shared<MatMulState>();
        st->conv = std::move(conv);
        return ctx.set_state(st);
      }
    }
    try {
      ctx.set_state(make_matmul(ctx.node(), a_md, b_md, dnnl_adapter::plain_md(out, dt), bias,
                                ctx.input_tensor(1), alpha_, ctx, &ops,
                                dnnl::memory::data_type::undef, nullptr, ctx.shapes_vary()));
    } catch (const KernelUnsupported&) {
      // the reference loop in run() takes over
    }
  }

  void run(RunContext& ctx) const override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    Tensor& y = ctx.output(0);
    const GemmDims d = gemm_dims(a.shape(), b.shape(), ta_, tb_, ctx.node());
    const auto* st = static_cast<const MatMulState*>(ctx.state_ptr());
    if (st && st->packed)  // (C, where there is one, is its bias)
      return run_packed_product(
          *st->packed, static_cast<const float*>(a.raw()), d.m,
          ctx.has_input(2) ? static_cast<const float*>(ctx.input(2).raw()) : nullptr, nullptr,
          static_cast<float*>(y.raw()), ctx.threads());
    if (st && st->conv)  // (C, where there is one, is its bias)
      return run_conv_route(*st->conv, ctx, a.raw(), b.raw(),
                            ctx.has_input(2) ? ctx.input(2).raw() : nullptr, nullptr, y.raw());
    if (st) {
      run_matmul(*st, ctx, a.raw(), b.raw(), ctx.has_input(2) ? ctx.input(2).raw() : nullptr,
                 y.raw());
      if (st->p->has_bias || !ctx.has_input(2)) return;
      add_c(ctx, y, /*scale_product=*/1.0f);
      apply_epilogue(y, nullptr, act_, nullptr, ctx.node());
      return;
    }
    dispatch_numeric(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, bool>) {
        ctx.error("does not apply to bool");
      } else {
        using C = typename Compute<T>::type;
        const T* pa = static_cast<const T*>(a.raw());
        const T* pb = static_cast<const T*>(b.raw());
        T* py = static_cast<T*>(y.raw());
        const int64_t lda = a.dim(1), ldb = b.dim(1);
#pragma omp parallel for if (d.m * d.n * d.k > 1 << 20)
        for (int64_t i = 0; i < d.m; ++i)
          for (int64_t j = 0; j < d.n; ++j) {
            C acc = 0;
            for (int64_t p = 0; p < d.k; ++p)
              acc += static_cast<C>(pa[ta_ ? p * lda + i : i * lda + p]) *
                     static_cast<C>(pb[tb_ ? j * ldb + p : p * ldb + j]);
            py[i * d.n + j] = static_cast<T>(static_cast<C>(alpha_) * acc);
          }
      }
    });
    if (ctx.has_input(2)) add_c(ctx, y, 1.0f);
    apply_epilogue(y, nullptr, act_, nullptr, ctx.node());
  }

 private:
  // y += beta * C, C broadcast to y.
  void add_c(RunContext& ctx, Tensor& y, float) const {
    const Tensor& c = ctx.input(2);
    const auto strides = broadcast_strides(c.shape(), y.shape());
    const int64_t m = y.dim(0), n = y.dim(1);
    dispatch_numeric(y.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!std::is_same_v<T, bool>) {
        using C = typename Compute<T>::type;
        const T* pc = static_cast<const T*>(c.raw());
        T* py = static_cast<T*>(y.raw());
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j)
            py[i * n + j] = static_cast<T>(static_cast<C>(py[i * n + j]) +
                                           static_cast<C>(beta_) *
                                               static_cast<C>(pc[i * strides[0] + j * strides[1]]));
      }
    });
  }
  bool ta_, tb_;
  float alpha_, beta_;
  bool legacy_broadcast_;
  FusedActivation act_;
};

}  // namespace

VOLT_REGISTER_KERNEL(matmul,
                     {.op = "MatMul", .types = kNumericTypes, .create = make_kernel<MatMulRef>});
VOLT_REGISTER_KERNEL(dnnl_matmul, {.op = "MatMul",
                                   .types = {DType::Float, DType::BFloat16},
                                   .priority = 10,
                                   .create = make_kernel<DnnlMatMul>});
VOLT_REGISTER_KERNEL(gemm, {.op = "Gemm", .types = kNumericTypes, .create = make_kernel<Gemm>});

}  // namespace volt
