// ExpandDepthwise (ai.volt): a 1×1 convolution that widens the channels and the depthwise
// convolution that reads its output, as one kernel: the pair inside every MobileNetV2 block,
// made by the fuse_expand_depthwise pass. Unfused, the widened tensor (six times the block's
// channels, at its resolution) goes out to memory and comes back, and at high resolution the
// depthwise convolution then waits on memory, not arithmetic.
//
// Where the widened tensor of the whole batch is larger than the caches (kStripAbove), each
// thread takes an image (or a band of one) and walks down it in strips: it expands a strip of
// rows into a buffer sized for its L2 cache and runs the depthwise convolution over them there.
// The rows a strip's windows share with the next stay in the buffer and are not expanded again.
// Below that size the two run over the whole batch, as they would unfused, the widened tensor in
// the node's scratch.
//
// Inputs: X [N, H, W, C] (channels-last), W1 [E, C, 1, 1], B1 [E] (optional), W2 [E, 1, kh, kw],
// B2 [E] (optional); all float, the weights constant. Attributes: the depthwise window
// (kernel_shape, strides, pads, auto_pad; dilations 1), its activation (volt.activation) and the
// expansion's (volt.expand_activation), each any a Conv takes as post-op.
// Output: Y [N, OH, OW, E], channels-last.
//
// Both halves are oneDNN convolutions over the rows of a strip (rows of an image are contiguous
// channels-last, so a strip is a small image; its windows' rows above and below the image are
// padding, elsewhere real rows), one primitive per strip shape.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <tuple>

#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/fused_activation.hpp"
#include "operators/cpu/conv_geometry.hpp"
#include "operators/registry.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

// The buffer of expanded rows per thread. Zen 4 and recent Intel cores have 1-2 MiB of L2:
// half a MiB leaves room for the strip of X being read and the output rows being written.
constexpr int64_t kStripBytes = 512 * 1024;
// Strips pay where the whole batch's widened tensor would leave the caches. Measured on
// MobileNetV2 (batch 8, one thread): its 112×112×96 (38 MiB) and 56×56×144 (14 MiB) tensors ran
// faster in strips; at 28×28×192 (4.6 MiB) and below, the whole-batch primitives were faster.
constexpr int64_t kStripAbove = 8 << 20;

// One step down an image: the output rows it writes and the input rows their windows read
// (clipped to the image), of which [e0, e1) are expanded now and the first `kept` are moved to
// the front of the buffer from the step before.
struct Strip {
  int64_t o0, o1;               // output rows
  int64_t a, b;                 // input rows held in the buffer for them (row a first)
  int64_t e0, e1;               // input rows expanded in this step
  int64_t kept;                 // rows [a, a + kept) come from the previous step's buffer
  int64_t pad_top, pad_bottom;  // window rows outside the image
};

struct Primitive {
  dnnl::convolution_forward prim;
  dnnl::memory::desc src, dst, scratch;
  size_t weights = 0;  // index into ExpandDepthwiseState::packed
};

struct ExpandDepthwiseState {
  int64_t n = 0, h = 0, w = 0, c = 0, e = 0, oh = 0, ow = 0;
  int64_t kh = 0, kw = 0, sh = 1, sw = 1, ph = 0, pw = 0, pw_end = 0;
  int64_t images = 1;                      // per work item: 1 in strips, N for the whole batch
  std::vector<std::vector<Strip>> chunks;  // the output rows of an item, split among threads
  int64_t buffer_rows = 0;
  size_t per_thread = 0;  // scratch bytes: the buffer, then the primitives' scratchpad
  int threads = 1;        // work items run in parallel (1: the primitives use all threads)
  Tensor w1, b1, w2, b2;  // the weights (until packed) and biases (undefined when absent)
  // oneDNN's primitives: the expansion per strip height, the depthwise convolution per strip
  // shape (input rows, padding above and below); the weights in each layout those picked.
  std::map<int64_t, Primitive> expansions;
  std::map<std::tuple<int64_t, int64_t, int64_t>, Primitive> depthwise;
  std::vector<std::pair<dnnl::memory::desc, Tensor>> packed;
  dnnl::memory::desc b1_md, b2_md;
};

// The output rows [lo, hi) in strips of `rows`, each with the input rows it needs; a strip keeps
// the rows it shares with the one before.
std::vector<Strip> walk(int64_t lo, int64_t hi, int64_t rows, const ExpandDepthwiseState& st) {
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

size_t align64(size_t n) {
  return (n + 63) / 64 * 64;
}

class ExpandDepthwise final : public Kernel {
 public:
  explicit ExpandDepthwise(const Node& n)
      : window_(n),
        expand_act_(FusedActivation::of(n, "volt.expand_")),
        act_(FusedActivation::of(n)) {}

  void infer(InferContext& ctx) const override {
    const Node& node = ctx.node();
    for (size_t i = 0; i < ctx.input_count(); ++i)
      if (ctx.has_input(i))
        VOLT_CHECK(ctx.dtype(i) == DType::Float, InvalidModel,
                   node.describe() + ": every input must be float");
    const Shape& x = ctx.shape(0);
    const Shape& w1 = ctx.shape(1);
    const Shape& w2 = ctx.shape(3);
    VOLT_CHECK(x.size() == 4, InvalidArgument,
               node.describe() + ": X must be N x H x W x C, got " + shape_str(x));
    VOLT_CHECK(w1.size() == 4 && w1[1] == x[3] && w1[2] == 1 && w1[3] == 1, InvalidArgument,
               node.describe() + ": W1 must be [E, " + std::to_string(x[3]) + ", 1, 1], got " +
                   shape_str(w1));
    VOLT_CHECK(x[1] > 0 && x[2] > 0 && x[3] > 0, InvalidArgument,
               node.describe() + ": X must have at least one row, column and channel, got " +
                   shape_str(x));
    const int64_t e = w1[0];
    VOLT_CHECK(w2.size() == 4 && w2[0] == e && w2[1] == 1, InvalidModel,
               node.describe() + ": W2 must be [" + std::to_string(e) + ", 1, kh, kw], got " +
                   shape_str(w2));
    for (size_t i : {size_t{2}, size_t{4}})
      if (ctx.has_input(i))
        VOLT_CHECK(ctx.shape(i) == Shape{e}, InvalidModel,
                   node.describe() + ": biases must have shape [" + std::to_string(e) + "]");
    const WindowGeometry g = resolve_window(window_, {x[1], x[2]}, {w2[2], w2[3]}, node);
    VOLT_CHECK(g.dilations == std::vector<int64_t>({1, 1}), InvalidModel,
               node.describe() + ": dilated depthwise windows are not fused");
    ctx.set_output(0, DType::Float, {x[0], g.out[0], g.out[1], e});
    for (size_t i = 1; i < ctx.input_count(); ++i)
      VOLT_CHECK(!ctx.has_input(i) || ctx.input_tensor(i), InvalidModel,
                 node.describe() + ": weights and biases must be constants");
    ctx.set_state(prepare(ctx, g, x, e));
  }

  void run(RunContext& ctx) const override {
    const auto& st = ctx.state<ExpandDepthwiseState>();
    if (st.n * st.oh * st.ow * st.e == 0) return;
    const float* x = static_cast<const float*>(ctx.input(0).raw());
    float* y = static_cast<float*>(ctx.output(0).raw());
    char* scratch = static_cast<char*>(ctx.scratch());
    const int64_t per_item = static_cast<int64_t>(st.chunks.size());
    const int64_t items = st.n / st.images * per_item;
    auto item = [&](int64_t i, int thread) {
      const int64_t image = i / per_item * st.images;
      run_chunk(st, st.chunks[static_cast<size_t>(i % per_item)], x + image * st.h * st.w * st.c,
                y + image * st.oh * st.ow * st.e,
                scratch + static_cast<size_t>(thread) * st.per_thread);
    };
    if (st.threads > 1 && items > 1) {
      // Each item's primitives then run on their thread alone (oneDNN does not nest teams).
#pragma omp parallel for num_threads(st.threads) schedule(static)
      for (int64_t i = 0; i < items; ++i) item(i, omp_get_thread_num());
    } else {
      for (int64_t i = 0; i < items; ++i) item(i, 0);
    }
  }

 private:
  // One item's rows of its image(s).
  void run_chunk(const ExpandDepthwiseState& st, const std::vector<Strip>& strips, const float* x,
                 float* y, char* workspace) const {
    float* buffer = reinterpret_cast<float*>(workspace);
    void* prim_scratch =
        workspace + align64(static_cast<size_t>(st.images * st.buffer_rows * st.w * st.e) * 4);
    const int64_t row = st.w * st.e;  // floats per expanded row
    int64_t held_a = 0;
    for (const Strip& s : strips) {
      if (s.kept > 0 && s.a != held_a)
        std::memmove(buffer, buffer + (s.a - held_a) * row,
                     static_cast<size_t>(s.kept * row) * sizeof(float));
      if (s.e1 > s.e0)
        expand(st, x + s.e0 * st.w * st.c, s.e1 - s.e0, buffer + (s.e0 - s.a) * row, prim_scratch);
      depthwise(st, s, buffer, y + s.o0 * st.ow * st.e, prim_scratch);
      held_a = s.a;
    }
  }

  void execute(const ExpandDepthwiseState& st, const Primitive& p, const void* src,
               const Tensor& bias, const dnnl::memory::desc& bias_md, void* dst,
               void* prim_scratch) const {
    const auto& [w_md, w] = st.packed[p.weights];
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, dnnl_adapter::wrap(p.src, src)},
        {DNNL_ARG_WEIGHTS, dnnl_adapter::wrap(w_md, w.raw())},
        {DNNL_ARG_DST, dnnl_adapter::wrap(p.dst, dst)}};
    if (bias.defined()) args.emplace(DNNL_ARG_BIAS, dnnl_adapter::wrap(bias_md, bias.raw()));
    dnnl_adapter::execute(p.prim, std::move(args), p.scratch, prim_scratch);
  }

  // The 1×1 convolution of `rows` rows of X into `out` ([rows × W][E] for each image).
  void expand(const ExpandDepthwiseState& st, const float* x, int64_t rows, float* out,
              void* prim_scratch) const {
    execute(st, st.expansions.at(rows), x, st.b1, st.b1_md, out, prim_scratch);
  }

  // The depthwise convolution of strip `s` (its input rows in `in`) into its output rows `y`.
  void depthwise(const ExpandDepthwiseState& st, const Strip& s, const float* in, float* y,
                 void* prim_scratch) const {
    execute(st, st.depthwise.at({s.b - s.a, s.pad_top, s.pad_bottom}), in, st.b2, st.b2_md, y,
            prim_scratch);
  }

  std::shared_ptr<ExpandDepthwiseState> prepare(InferContext& ctx, const WindowGeometry& g,
                                                const Shape& x, int64_t e) const {
    auto st = std::make_shared<ExpandDepthwiseState>();
    st->n = x[0];
    st->h = x[1];
    st->w = x[2];
    st->c = x[3];
    st->e = e;
    st->oh = g.out[0];
    st->ow = g.out[1];
    st->kh = g.kernel[0];
    st->kw = g.kernel[1];
    st->sh = g.strides[0];
    st->sw = g.strides[1];
    st->ph = g.pad_begin[0];
    st->pw = g.pad_begin[1];
    st->pw_end = g.pad_end[1];
    st->w1 = *ctx.input_tensor(1);
    if (ctx.has_input(2)) st->b1 = *ctx.input_tensor(2);
    st->w2 = *ctx.input_tensor(3);
    if (ctx.has_input(4)) st->b2 = *ctx.input_tensor(4);
    if (st->n * st->oh * st->ow * e == 0) return st;

    const int64_t row_bytes = st->w * e * static_cast<int64_t>(sizeof(float));
    const int threads = std::max(1, ctx.threads());
    if (st->n * st->h * row_bytes <= kStripAbove) {  // the whole batch at once
      st->images = st->n;
      st->chunks.push_back(walk(0, st->oh, st->oh, *st));
    } else {
      // Strip height: as many output rows as keep the rows they read within kStripBytes.
      // Threads: whole images where the batch gives each thread one; otherwise images split into
      // bands of rows, each band expanding again the rows its windows share with the one above.
      const int64_t fit = std::max<int64_t>(st->kh, kStripBytes / row_bytes);
      const int64_t strip = std::max<int64_t>(1, (fit - st->kh) / st->sh + 1);
      const int64_t bands = std::clamp<int64_t>((threads + st->n - 1) / st->n, 1, st->oh);
      for (int64_t b = 0; b < bands; ++b)
        st->chunks.push_back(walk(st->oh * b / bands, st->oh * (b + 1) / bands, strip, *st));
      st->threads = threads;
    }
    for (const auto& chunk : st->chunks)
      for (const Strip& s : chunk) st->buffer_rows = std::max(st->buffer_rows, s.b - s.a);

    // fp32 convolutions oneDNN always has (its reference ones at worst): a failure is an error.
    dnnl_adapter::guarded(ctx.node(), [&] {
      prepare_primitives(*st);
      return 0;
    });
    st->w1 = st->w2 = Tensor();  // the primitives read their packed copies
    size_t prim_scratch = 0;
    for (const auto& [rows, p] : st->expansions)
      prim_scratch = std::max(prim_scratch, p.scratch.get_size());
    for (const auto& [shape, p] : st->depthwise)
      prim_scratch = std::max(prim_scratch, p.scratch.get_size());
    st->per_thread = align64(static_cast<size_t>(st->images * st->buffer_rows * row_bytes)) +
                     align64(prim_scratch);
    ctx.request_scratch(st->per_thread * static_cast<size_t>(st->threads));
    return st;
  }

  // A oneDNN convolution for every strip shape the walks take: the expansions, then the
  // depthwise convolutions.
  void prepare_primitives(ExpandDepthwiseState& st) const {
    using tag = dnnl::memory::format_tag;
    using dt = dnnl::memory::data_type;
    const auto kind = dnnl::prop_kind::forward_inference;
    const auto alg = dnnl::algorithm::convolution_direct;
    auto attr_with = [](const FusedActivation& act) {
      dnnl::primitive_attr attr = dnnl_adapter::scratch_attr();
      dnnl::post_ops ops;
      act.append_to(ops);
      attr.set_post_ops(ops);
      return attr;
    };
    auto make = [&](const dnnl::convolution_forward::desc& d, const dnnl::primitive_attr& attr,
                    const Tensor& weights, const dnnl::memory::desc& plain_w) {
      const dnnl::convolution_forward::primitive_desc pd(d, attr, dnnl_adapter::engine());
      Primitive p;
      p.prim = dnnl::convolution_forward(pd);
      p.src = pd.src_desc();
      p.dst = pd.dst_desc();
      p.scratch = pd.scratchpad_desc();
      p.weights = pack_weights(st, weights, plain_w, pd.weights_desc());
      return p;
    };
    if (st.b1.defined()) st.b1_md = dnnl::memory::desc({st.e}, dt::f32, tag::a);
    if (st.b2.defined()) st.b2_md = dnnl::memory::desc({st.e}, dt::f32, tag::a);
    const dnnl::memory::desc w1_plain({st.e, st.c, 1, 1}, dt::f32, tag::oihw);
    const dnnl::memory::desc w1_any({st.e, st.c, 1, 1}, dt::f32, tag::any);
    const dnnl::memory::desc w2_plain({st.e, 1, 1, st.kh, st.kw}, dt::f32, tag::goihw);
    const dnnl::memory::desc w2_any({st.e, 1, 1, st.kh, st.kw}, dt::f32, tag::any);
    const dnnl::primitive_attr expand_attr = attr_with(expand_act_), dw_attr = attr_with(act_);
    const int64_t n = st.images;
    for (const auto& chunk : st.chunks)
      for (const Strip& s : chunk) {
        const int64_t rows = s.e1 - s.e0;
        if (rows > 0 && !st.expansions.count(rows)) {
          const dnnl::memory::desc src({n, st.c, rows, st.w}, dt::f32, tag::nhwc);
          const dnnl::memory::desc dst({n, st.e, rows, st.w}, dt::f32, tag::nhwc);
          const auto d = st.b1.defined()
                             ? dnnl::convolution_forward::desc(kind, alg, src, w1_any, st.b1_md,
                                                               dst, {1, 1}, {0, 0}, {0, 0})
                             : dnnl::convolution_forward::desc(kind, alg, src, w1_any, dst, {1, 1},
                                                               {0, 0}, {0, 0});
          st.expansions.emplace(rows, make(d, expand_attr, st.w1, w1_plain));
        }
        const std::tuple<int64_t, int64_t, int64_t> shape{s.b - s.a, s.pad_top, s.pad_bottom};
        if (st.depthwise.count(shape)) continue;
        const dnnl::memory::desc src({n, st.e, s.b - s.a, st.w}, dt::f32, tag::nhwc);
        const dnnl::memory::desc dst({n, st.e, s.o1 - s.o0, st.ow}, dt::f32, tag::nhwc);
        const dnnl::memory::dims strides = {st.sh, st.sw}, dil = {0, 0}, pl = {s.pad_top, st.pw},
                                 pr = {s.pad_bottom, st.pw_end};
        const auto d = st.b2.defined()
                           ? dnnl::convolution_forward::desc(kind, alg, src, w2_any, st.b2_md, dst,
                                                             strides, dil, pl, pr)
                           : dnnl::convolution_forward::desc(kind, alg, src, w2_any, dst, strides,
                                                             dil, pl, pr);
        st.depthwise.emplace(shape, make(d, dw_attr, st.w2, w2_plain));
      }
  }

  // The index in st.packed of `weights` reordered from `plain` into `md`, reordering once per
  // layout (the strips' primitives mostly agree on one).
  static size_t pack_weights(ExpandDepthwiseState& st, const Tensor& weights,
                             const dnnl::memory::desc& plain, const dnnl::memory::desc& md) {
    for (size_t i = 0; i < st.packed.size(); ++i)
      if (st.packed[i].first == md) return i;  // W1's and W2's descriptors differ in their dims
    Tensor packed = allocate_tensor(DType::UInt8, {static_cast<int64_t>(md.get_size())});
    dnnl::memory from = dnnl_adapter::wrap(plain, weights.raw());
    dnnl::memory to = dnnl_adapter::wrap(md, packed.raw());
    dnnl::reorder(from, to).execute(dnnl_adapter::stream(), from, to);
    dnnl_adapter::stream().wait();
    st.packed.emplace_back(md, std::move(packed));
    return st.packed.size() - 1;
  }

  WindowAttributes window_;
  FusedActivation expand_act_, act_;
};

}  // namespace

VOLT_REGISTER_KERNEL(expand_depthwise,
                     volt_kernel("ExpandDepthwise", make_kernel<ExpandDepthwise>));

}  // namespace volt
