// DepthwiseBlock (ai.volt): a depthwise convolution with the 1×1 convolution that feeds it
// (MobileNetV2's expansion) and the 1×1 convolution that reads it (the projection, with the
// block's residual sum), either of the two optional, as one kernel; made by the
// fuse_depthwise_block pass. Unfused, the wide tensors between them (six times the block's
// channels, at its resolution) go out to memory and come back, and at high resolution the
// depthwise convolution and the projection then wait on memory, not arithmetic.
//
// Where the batch's widest intermediate is larger than the caches (kStripAbove), each thread
// takes an image (or a band of one) and walks down it in strips: it expands a strip of rows into
// a buffer sized for its L2 cache, runs the depthwise convolution over them into a second one and
// projects that into the output rows. The rows a strip's windows share with the next stay in the
// buffer and are not expanded again. Below that size the three run over the whole batch, as they
// would unfused, the intermediates in the node's scratch.
//
// Neither 1x1 convolution is there where the depthwise convolution's activation is one volt
// applies itself (own_activation.hpp): strips keep its output rows in cache for that pass.
//
// Inputs: X [N, H, W, C] (channels-last), W1 [E, C, 1, 1] and B1 [E] (the expansion: optional,
// E = C without it), W2 [E, 1, kh, kw], B2 [E], W3 [M, E, 1, 1] and B3 [M] (the projection:
// optional), R [N, OH, OW, M] (the residual the projection adds: optional); float, the weights
// constant, the biases optional. Attributes: the depthwise window (kernel_shape, strides, pads,
// auto_pad; dilations 1) and its activation (volt.activation), the expansion's
// (volt.expand_activation) and the projection's (volt.project_activation, after the residual),
// each any a Conv takes as post-op. Output: Y [N, OH, OW, M (E without a projection)].
//
// All three are oneDNN convolutions over the rows of a strip (rows of an image are contiguous
// channels-last, so a strip is a small image; its windows' rows above and below the image are
// padding, elsewhere real rows), one primitive per strip shape.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>

#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/fused_activation.hpp"
#include "operators/common/own_activation.hpp"
#include "operators/cpu/conv_geometry.hpp"
#include "operators/registry.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

// The buffers per thread: a strip's expanded rows get this much. Zen 4 and recent Intel cores
// have 1-2 MiB of L2: half a MiB leaves room for the depthwise output, the strip of X being read
// and the output rows being written.
constexpr int64_t kStripBytes = 512 * 1024;
// Strips pay where the whole batch's widest intermediate would leave the caches. Measured on
// MobileNetV2 (batch 8, one thread): its 112×112×96 (38 MiB) and 56×56×144 (14 MiB) tensors ran
// faster in strips; at 28×28×192 (4.6 MiB) and below, strips and the whole batch ran alike.
// With more threads, strips also spare the smaller tensors the barriers of three parallel
// primitives (each thread walks its own image or band): MobileNetV2 on two threads ran 3-4%
// faster at batch 1 and 1-3% at batch 8 with strips from 1 MiB up than from 8 MiB up.
constexpr int64_t kStripAbove = 8 << 20, kStripAboveThreaded = 1 << 20;
constexpr int64_t kMaxStrips = 4096;

enum Input : size_t { kX, kW1, kB1, kW2, kB2, kW3, kB3, kR };

// One step down an image: the output rows it writes and the input rows their windows read
// (clipped to the image), of which [e0, e1) are expanded now and the first `kept` are moved to
// the front of the buffer from the step before.
struct Strip {
  int64_t o0, o1;               // output rows
  int64_t a, b;                 // input rows the windows read (row a first)
  int64_t e0, e1;               // input rows expanded in this step
  int64_t kept;                 // rows [a, a + kept) come from the previous step's buffer
  int64_t pad_top, pad_bottom;  // window rows outside the image
};

struct Primitive {
  dnnl::convolution_forward prim;
  dnnl::memory::desc src, dst, scratch;
  size_t weights = 0;  // index into DepthwiseBlockState::packed
};

struct DepthwiseBlockState {
  int64_t n = 0, h = 0, w = 0, c = 0, e = 0, m = 0, oh = 0, ow = 0;
  int64_t kh = 0, kw = 0, sh = 1, sw = 1, ph = 0, pw = 0, pw_end = 0;
  bool expand = false, project = false, residual = false;
  int64_t images = 1;                      // per work item: 1 in strips, N for the whole batch
  std::vector<std::vector<Strip>> chunks;  // the output rows of an item, split among threads
  size_t expanded_bytes = 0, depthwise_bytes = 0;  // the two buffers, per thread
  size_t per_thread = 0;  // scratch bytes: the buffers, then the primitives' scratchpad
  int threads = 1;        // work items run in parallel (1: the primitives use all threads)
  // The expansion's and the depthwise convolution's activations, where volt applies them to the
  // rows the primitive wrote (own_activation.hpp) instead of oneDNN's post-op.
  bool own_expand_act = false, own_act = false;
  Tensor b1, b2, b3;  // the biases (undefined when absent)
  // oneDNN's primitives: the expansion per strip height, the depthwise convolution per strip
  // shape (input rows, padding above and below), the projection per output rows; the weights in
  // each layout those picked.
  std::map<int64_t, Primitive> expansions, projections;
  std::map<std::tuple<int64_t, int64_t, int64_t>, Primitive> depthwise;
  struct Packed {
    size_t input;  // W1, W2 or W3
    dnnl::memory::desc md;
    Tensor data;
  };
  std::vector<Packed> packed;
  dnnl::memory::desc b1_md, b2_md, b3_md;
};

// The output rows [lo, hi) in strips of `rows`, each with the input rows it needs; a strip keeps
// the rows it shares with the one before.
std::vector<Strip> walk(int64_t lo, int64_t hi, int64_t rows, const DepthwiseBlockState& st) {
  std::vector<Strip> strips;
  int64_t held_a = 0, held_b = 0;
  for (int64_t o0 = lo; o0 < hi; o0 += rows) {
    Strip s{};
    s.o0 = o0;
    s.o1 = std::min(hi, o0 + rows);
    const int64_t first = s.o0 * st.sh - st.ph, last = (s.o1 - 1) * st.sh - st.ph + st.kh - 1;
    s.a = std::clamp<int64_t>(first, 0, st.h);
    s.b = std::clamp<int64_t>(last + 1, s.a, st.h);
    s.pad_top = std::max<int64_t>(0, -first);
    s.pad_bottom = std::max<int64_t>(0, last - (st.h - 1));
    const bool overlap = !strips.empty() && s.a >= held_a && s.a < held_b;
    s.kept = overlap ? std::min(held_b, s.b) - s.a : 0;
    s.e0 = s.a + s.kept;
    s.e1 = s.b;
    strips.push_back(s);
    held_a = s.a;
    held_b = s.b;
  }
  return strips;
}

class DepthwiseBlock final : public Kernel {
 public:
  explicit DepthwiseBlock(const Node& n)
      : window_(n),
        expand_act_(FusedActivation::of(n, "volt.expand_")),
        act_(FusedActivation::of(n)),
        project_act_(FusedActivation::of(n, "volt.project_")) {}

  void infer(InferContext& ctx) const override {
    const Node& node = ctx.node();
    VOLT_CHECK(ctx.has_input(kX) && ctx.has_input(kW2), InvalidModel,
               node.describe() + ": X and the depthwise weights are required");
    VOLT_CHECK(!ctx.has_input(kR) || ctx.has_input(kW3), InvalidModel,
               node.describe() + ": a residual needs the projection it is added to");
    for (size_t i = 0; i < ctx.input_count(); ++i)
      if (ctx.has_input(i)) {
        VOLT_CHECK(ctx.dtype(i) == DType::Float, InvalidModel,
                   node.describe() + ": every input must be float");
        VOLT_CHECK(i == kX || i == kR || ctx.input_tensor(i), InvalidModel,
                   node.describe() + ": weights and biases must be constants");
      }
    const Shape& x = ctx.shape(kX);
    VOLT_CHECK(
        x.size() == 4 && x[1] > 0 && x[2] > 0 && x[3] > 0, InvalidArgument,
        node.describe() + ": X must be N x H x W x C with H, W, C >= 1, got " + shape_str(x));
    auto check_1x1 = [&](size_t i, int64_t in, const char* name) {
      const Shape& w = ctx.shape(i);
      VOLT_CHECK(w.size() == 4 && w[1] == in && w[2] == 1 && w[3] == 1, InvalidModel,
                 node.describe() + ": " + name + " must be [?, " + std::to_string(in) +
                     ", 1, 1], got " + shape_str(w));
      return w[0];
    };
    auto check_bias = [&](size_t i, int64_t size) {
      if (ctx.has_input(i))
        VOLT_CHECK(ctx.shape(i) == Shape{size}, InvalidModel,
                   node.describe() + ": biases must have shape [" + std::to_string(size) + "]");
    };
    const int64_t e = ctx.has_input(kW1) ? check_1x1(kW1, x[3], "W1") : x[3];
    check_bias(kB1, e);
    const Shape& w2 = ctx.shape(kW2);
    VOLT_CHECK(w2.size() == 4 && w2[0] == e && w2[1] == 1, InvalidModel,
               node.describe() + ": W2 must be [" + std::to_string(e) + ", 1, kh, kw], got " +
                   shape_str(w2));
    check_bias(kB2, e);
    const int64_t m = ctx.has_input(kW3) ? check_1x1(kW3, e, "W3") : e;
    check_bias(kB3, m);
    const WindowGeometry g = resolve_window(window_, {x[1], x[2]}, {w2[2], w2[3]}, node);
    VOLT_CHECK(g.dilations == std::vector<int64_t>({1, 1}), InvalidModel,
               node.describe() + ": dilated depthwise windows are not fused");
    const Shape y = {x[0], g.out[0], g.out[1], m};
    if (ctx.has_input(kR))
      VOLT_CHECK(ctx.shape(kR) == y, InvalidArgument,
                 node.describe() + ": the residual must have the output's shape " + shape_str(y) +
                     ", got " + shape_str(ctx.shape(kR)));
    ctx.set_output(0, DType::Float, y);
    ctx.set_state(prepare(ctx, g, x, e, m));
  }

  void run(RunContext& ctx) const override {
    const auto& st = ctx.state<DepthwiseBlockState>();
    if (st.n * st.oh * st.ow * st.m == 0) return;
    const float* x = static_cast<const float*>(ctx.input(kX).raw());
    const float* r = st.residual ? static_cast<const float*>(ctx.input(kR).raw()) : nullptr;
    float* y = static_cast<float*>(ctx.output(0).raw());
    char* scratch = static_cast<char*>(ctx.scratch());
    const int64_t per_item = static_cast<int64_t>(st.chunks.size());
    const int64_t items = st.n / st.images * per_item;
    const int64_t y_image = st.oh * st.ow * st.m;
    const bool in_parallel = st.threads > 1 && items > 1;
    auto item = [&](int64_t i, int thread) {
      const int64_t image = i / per_item * st.images;
      run_chunk(st, st.chunks[static_cast<size_t>(i % per_item)], x + image * st.h * st.w * st.c,
                r ? r + image * y_image : nullptr, y + image * y_image,
                scratch + static_cast<size_t>(thread) * st.per_thread, !in_parallel);
    };
    if (in_parallel) {
      // Each item's primitives then run on their thread alone (oneDNN does not nest teams).
#pragma omp parallel for num_threads(st.threads) schedule(static)
      for (int64_t i = 0; i < items; ++i) item(i, omp_get_thread_num());
    } else {
      for (int64_t i = 0; i < items; ++i) item(i, 0);
    }
  }

 private:
  // One item's rows of its image(s); `spread`: the item runs alone, its primitives (and volt's
  // activations) over all threads.
  void run_chunk(const DepthwiseBlockState& st, const std::vector<Strip>& strips, const float* x,
                 const float* r, float* y, char* workspace, bool spread) const {
    auto activate = [&](const FusedActivation& act, float* data, int64_t rows, int64_t row_floats) {
      const int64_t count = st.images * rows * row_floats;
      if (spread)
        apply_own_activation_in_parallel(act, data, count);
      else
        apply_own_activation(act, data, count);
    };
    float* expanded = reinterpret_cast<float*>(workspace);
    float* filtered = reinterpret_cast<float*>(workspace + st.expanded_bytes);
    void* prim_scratch = workspace + st.expanded_bytes + st.depthwise_bytes;
    const int64_t row = st.w * st.e;  // floats per row of the depthwise convolution's input
    int64_t held_a = 0;
    for (const Strip& s : strips) {
      const float* dw_in = x + s.a * row;  // without an expansion, X's own rows
      if (st.expand) {
        if (s.kept > 0 && s.a != held_a)
          std::memmove(expanded, expanded + (s.a - held_a) * row,
                       static_cast<size_t>(s.kept * row) * sizeof(float));
        if (s.e1 > s.e0) {
          float* rows = expanded + (s.e0 - s.a) * row;
          execute(st, st.expansions.at(s.e1 - s.e0), x + s.e0 * st.w * st.c, st.b1, st.b1_md, rows,
                  prim_scratch);
          if (st.own_expand_act) activate(expand_act_, rows, s.e1 - s.e0, row);
        }
        dw_in = expanded;
      }
      float* out = y + s.o0 * st.ow * st.m;
      float* dw_out = st.project ? filtered : out;
      execute(st, st.depthwise.at({s.b - s.a, s.pad_top, s.pad_bottom}), dw_in, st.b2, st.b2_md,
              dw_out, prim_scratch);
      if (st.own_act) activate(act_, dw_out, s.o1 - s.o0, st.ow * st.e);
      if (st.project) {
        if (r)  // the sum post-op adds the projection to what the output rows hold
          std::memcpy(
              out, r + s.o0 * st.ow * st.m,
              static_cast<size_t>(st.images * (s.o1 - s.o0) * st.ow * st.m) * sizeof(float));
        execute(st, st.projections.at(s.o1 - s.o0), filtered, st.b3, st.b3_md, out, prim_scratch);
      }
      held_a = s.a;
    }
  }

  static void execute(const DepthwiseBlockState& st, const Primitive& p, const void* src,
                      const Tensor& bias, const dnnl::memory::desc& bias_md, void* dst,
                      void* prim_scratch) {
    const auto& w = st.packed[p.weights];
    dnnl_adapter::Args args = {{DNNL_ARG_SRC, p.src, src},
                               {DNNL_ARG_WEIGHTS, w.md, w.data.raw()},
                               {DNNL_ARG_DST, p.dst, dst}};
    if (bias.defined()) args.add(DNNL_ARG_BIAS, bias_md, bias.raw());
    dnnl_adapter::execute(p.prim, args, p.scratch, prim_scratch);
  }

  std::shared_ptr<DepthwiseBlockState> prepare(InferContext& ctx, const WindowGeometry& g,
                                               const Shape& x, int64_t e, int64_t m) const {
    auto st = std::make_shared<DepthwiseBlockState>();
    st->n = x[0];
    st->h = x[1];
    st->w = x[2];
    st->c = x[3];
    st->e = e;
    st->m = m;
    st->oh = g.out[0];
    st->ow = g.out[1];
    st->kh = g.kernel[0];
    st->kw = g.kernel[1];
    st->sh = g.strides[0];
    st->sw = g.strides[1];
    st->ph = g.pad_begin[0];
    st->pw = g.pad_begin[1];
    st->pw_end = g.pad_end[1];
    st->expand = ctx.has_input(kW1);
    st->project = ctx.has_input(kW3);
    st->residual = ctx.has_input(kR);
    for (auto [i, b] : {std::pair{kB1, &st->b1}, {kB2, &st->b2}, {kB3, &st->b3}})
      if (ctx.has_input(i)) *b = *ctx.input_tensor(i);
    if (st->n * st->oh * st->ow * m == 0) return st;

    const int64_t in_row = st->w * e * 4, out_row = st->ow * e * 4;  // bytes, E channels
    // (A block of the depthwise convolution alone is there for the activation volt applies to
    // its output rows, in strips where that output is large.)
    const int64_t widest = st->n * std::max(st->expand ? st->h * in_row : 0, st->oh * out_row);
    const int threads = std::max(1, ctx.threads());
    if (widest > (threads > 1 ? kStripAboveThreaded : kStripAbove)) {
      // Strip height: as many output rows as keep what they read (expanded) or write (before
      // the projection) within kStripBytes. Threads: whole images where the batch gives each
      // thread one; otherwise images split into bands of rows, each band expanding again the
      // rows its windows share with the band above.
      // (At most kMaxStrips strips a band, whatever the height a model asks for: the walk's
      // length stays bounded before the planner weighs the output's size.)
      const int64_t fit =
          st->expand
              ? std::max<int64_t>(1, (std::max(st->kh, kStripBytes / in_row) - st->kh) / st->sh + 1)
              : std::max<int64_t>(1, kStripBytes / out_row);
      const int64_t strip = std::max(fit, (st->oh + kMaxStrips - 1) / kMaxStrips);
      const int64_t bands = std::clamp<int64_t>((threads + st->n - 1) / st->n, 1, st->oh);
      for (int64_t b = 0; b < bands; ++b)
        st->chunks.push_back(walk(st->oh * b / bands, st->oh * (b + 1) / bands, strip, *st));
      st->threads = threads;
      // A strip whose windows read padding alone (pads of the window's height or more, which
      // ONNX allows) would be a convolution of no rows: the whole batch at once then.
      bool padding_alone = false;
      for (const auto& chunk : st->chunks)
        for (const Strip& s : chunk) padding_alone = padding_alone || s.b == s.a;
      if (padding_alone) {
        st->chunks.clear();
        st->threads = 1;
      }
    }
    if (st->chunks.empty()) {  // the whole batch at once
      st->images = st->n;
      st->chunks.push_back(walk(0, st->oh, st->oh, *st));
    }
    int64_t in_rows = 0, out_rows = 0;
    for (const auto& chunk : st->chunks)
      for (const Strip& s : chunk) {
        in_rows = std::max(in_rows, s.b - s.a);
        out_rows = std::max(out_rows, s.o1 - s.o0);
      }
    if (st->expand)
      st->expanded_bytes =
          dnnl_adapter::align64(static_cast<size_t>(st->images * in_rows * in_row));
    if (st->project)
      st->depthwise_bytes =
          dnnl_adapter::align64(static_cast<size_t>(st->images * out_rows * out_row));

    // fp32 convolutions oneDNN always has (its reference ones at worst): a failure is an error.
    dnnl_adapter::guarded(ctx.node(), [&] {
      prepare_primitives(ctx, *st);
      return 0;
    });
    size_t prim_scratch = 0;
    for (const auto* group : {&st->expansions, &st->projections})
      for (const auto& [rows, p] : *group)
        prim_scratch = std::max(prim_scratch, p.scratch.get_size());
    for (const auto& [shape, p] : st->depthwise)
      prim_scratch = std::max(prim_scratch, p.scratch.get_size());
    st->per_thread = st->expanded_bytes + st->depthwise_bytes + dnnl_adapter::align64(prim_scratch);
    ctx.request_scratch(st->per_thread * static_cast<size_t>(st->threads));
    return st;
  }

  // A oneDNN convolution for every strip shape the walks take.
  void prepare_primitives(InferContext& ctx, DepthwiseBlockState& st) const {
    using tag = dnnl::memory::format_tag;
    using dt = dnnl::memory::data_type;
    const int64_t n = st.images;
    auto activation = [](const dnnl::memory::dims& dims) {
      return dnnl::memory::desc(dims, dt::f32, tag::nhwc);
    };
    auto bias_md = [&](size_t i, int64_t size) {
      return ctx.has_input(i) ? dnnl::memory::desc({size}, dt::f32, tag::a) : dnnl::memory::desc();
    };
    st.b1_md = bias_md(kB1, st.e);
    st.b2_md = bias_md(kB2, st.e);
    st.b3_md = bias_md(kB3, st.m);
    // One convolution: its weights reordered once per layout the primitives pick.
    auto make = [&](size_t w_input, const dnnl::memory::dims& w_dims, tag w_tag,
                    const dnnl::memory::desc& src, const dnnl::memory::desc& bias,
                    const dnnl::memory::desc& dst, const dnnl::memory::dims& strides,
                    const dnnl::memory::dims& pl, const dnnl::memory::dims& pr,
                    const FusedActivation& act, bool sum) {
      dnnl::primitive_attr attr = dnnl_adapter::scratch_attr();
      dnnl::post_ops ops;
      if (sum) ops.append_sum(1.0f);
      act.append_to(ops);
      attr.set_post_ops(ops);
      const dnnl::memory::desc w_any(w_dims, dt::f32, tag::any);
      const auto kind = dnnl::prop_kind::forward_inference;
      const auto alg = dnnl::algorithm::convolution_direct;
      const dnnl::memory::dims dil = {0, 0};
      const auto d =
          bias.get_size() > 0
              ? dnnl::convolution_forward::desc(kind, alg, src, w_any, bias, dst, strides, dil, pl,
                                                pr)
              : dnnl::convolution_forward::desc(kind, alg, src, w_any, dst, strides, dil, pl, pr);
      const dnnl::convolution_forward::primitive_desc pd(d, attr, dnnl_adapter::engine());
      Primitive p;
      p.prim = dnnl::convolution_forward(pd);
      p.src = pd.src_desc();
      p.dst = pd.dst_desc();
      p.scratch = pd.scratchpad_desc();
      p.weights = pack(ctx, st, w_input, *ctx.input_tensor(w_input),
                       dnnl::memory::desc(w_dims, dt::f32, w_tag), pd.weights_desc());
      return p;
    };
    const dnnl::memory::dims ones = {1, 1}, zeros = {0, 0};
    st.own_expand_act = has_own_activation(expand_act_);
    st.own_act = has_own_activation(act_);
    const FusedActivation none, &expand_act = st.own_expand_act ? none : expand_act_,
                                &act = st.own_act ? none : act_;
    for (const auto& chunk : st.chunks)
      for (const Strip& s : chunk) {
        const int64_t rows = s.e1 - s.e0, out_rows = s.o1 - s.o0;
        if (st.expand && rows > 0 && !st.expansions.count(rows))
          st.expansions.emplace(
              rows,
              make(kW1, {st.e, st.c, 1, 1}, tag::oihw, activation({n, st.c, rows, st.w}), st.b1_md,
                   activation({n, st.e, rows, st.w}), ones, zeros, zeros, expand_act, false));
        const std::tuple<int64_t, int64_t, int64_t> shape{s.b - s.a, s.pad_top, s.pad_bottom};
        if (!st.depthwise.count(shape))
          st.depthwise.emplace(shape,
                               make(kW2, {st.e, 1, 1, st.kh, st.kw}, tag::goihw,
                                    activation({n, st.e, s.b - s.a, st.w}), st.b2_md,
                                    activation({n, st.e, out_rows, st.ow}), {st.sh, st.sw},
                                    {s.pad_top, st.pw}, {s.pad_bottom, st.pw_end}, act, false));
        if (st.project && !st.projections.count(out_rows))
          st.projections.emplace(out_rows, make(kW3, {st.m, st.e, 1, 1}, tag::oihw,
                                                activation({n, st.e, out_rows, st.ow}), st.b3_md,
                                                activation({n, st.m, out_rows, st.ow}), ones, zeros,
                                                zeros, project_act_, st.residual));
      }
  }

  // The index in st.packed of input `input` (`weights`) reordered from `plain` into `md`,
  // reordering once per layout (the strips' primitives mostly agree on one). The first copy of
  // each input is the one the planner may drop the model's copy for (InferContext::
  // keeps_copy_of_input): run() never reads the weights themselves.
  static size_t pack(InferContext& ctx, DepthwiseBlockState& st, size_t input,
                     const Tensor& weights, const dnnl::memory::desc& plain,
                     const dnnl::memory::desc& md) {
    bool first = true;
    for (size_t i = 0; i < st.packed.size(); ++i) {
      if (st.packed[i].input != input) continue;
      if (st.packed[i].md == md) return i;
      first = false;
    }
    Tensor packed;
    if (first) {
      packed = dnnl_adapter::pack_constant(ctx, input, weights, plain, md);
    } else {
      packed = allocate_tensor(DType::UInt8, {static_cast<int64_t>(md.get_size())});
      dnnl_adapter::reorder_now(plain, weights.raw(), md, packed.raw());
    }
    st.packed.push_back({input, md, std::move(packed)});
    return st.packed.size() - 1;
  }

  WindowAttributes window_;
  FusedActivation expand_act_, act_, project_act_;
};

}  // namespace

VOLT_REGISTER_KERNEL(depthwise_block, volt_kernel("DepthwiseBlock", make_kernel<DepthwiseBlock>));

}  // namespace volt
