#include "operators/cpu/rnn_dnnl.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>

#include "operators/common/dnnl_adapter.hpp"
#include "operators/common/packed_weights.hpp"
#include "operators/common/parallel.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

using dims = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;
constexpr auto f32 = dnnl::memory::data_type::f32;

// The shapes and plain descriptors the forward and backward primitives share.
struct Geometry {
  dnnl::memory::desc src_layer, src_iter, src_iter_c, peephole, bias, dst_layer, dst_iter,
      dst_iter_c;
  dnnl::rnn_direction direction = dnnl::rnn_direction::unidirectional_left2right;
  bool lbr = false, peepholes = false;
  int64_t seq = 0, batch = 0, hidden = 0, in = 0;
  // Whether W, R, B and P are constants (inference) rather than fed each run (training).
  bool constant_weights = false;
};

// The primitives made from a Geometry: the forward one (inference, or training with a workspace
// for the backward one) and, for training, the backward one.
struct Primitives {
  dnnl::primitive forward, backward;
  dnnl::memory::desc weights_layer, weights_iter, scratch, workspace;
  // Backward: the weights as it reads them, the weight gradients as it writes them.
  dnnl::memory::desc bwd_weights_layer, bwd_weights_iter, diff_weights_layer, diff_weights_iter;
};

struct RecurrentState {
  Geometry g;
  Primitives p;
  // The weights in oneDNN's layouts: packed once when they are constants; otherwise (training
  // feeds them each step) packed at each run.
  struct Weights {
    Tensor layer, iter, peephole, bias;
  } weights;
  size_t dst_layer_offset = 0, dst_iter_offset = 0, dst_iter_c_offset = 0;
  // A right-to-left direction run apart: X in reverse time order, in the direction's scratch.
  size_t reversed_x_offset = 0;
  // A bidirectional node run as its two directions side by side (runs_directions_apart): one
  // unidirectional state per direction, its buffers at direction_scratch[d] in the node's scratch.
  std::vector<std::shared_ptr<RecurrentState>> directions;
  std::vector<size_t> direction_scratch;
  // A plan built for one of several sequence lengths (InferContext::shapes_vary) runs each
  // direction as consecutive chunks of fixed lengths (chunk_lengths), the final state of one
  // chunk the initial state of the next, on unidirectional primitives kept in the node's memo:
  // they serve every length, where a primitive made for the exact length costs 0.5-1 ms of code
  // generation at each new length (speech_lstm_gru: 2.2 ms of its 2.9 ms plan).
  struct Chunk {
    int64_t start = 0, steps = 0;
    std::shared_ptr<const RecurrentState> primitive;
  };
  struct ChunkedDirection {
    std::vector<Chunk> chunks;  // in the order they run, over X as the direction reads it
    // In the node's scratch: this direction's region; within it, the primitives' scratch at 0,
    // the direction's outputs [T, N, H] (in its reading order) and two state slots (h, then c)
    // that the chunks pass on; right to left, X in reverse time order after them.
    size_t region = 0, layer = 0, slots[2] = {0, 0}, reversed_x = 0;
    bool reversed = false;
  };
  std::vector<ChunkedDirection> chunked;
};

int64_t gate_count(Cell cell) {
  return cell == Cell::Rnn ? 1 : (cell == Cell::Gru ? 3 : 4);
}

// The ONNX gate behind oneDNN's gate k. oneDNN orders LSTM gates i, f, c, o and ONNX i, o, f, c;
// GRU (update, reset, candidate) and RNN agree.
int64_t onnx_gate(Cell cell, int64_t k) {
  static constexpr int64_t kLstm[4] = {0, 2, 3, 1};
  return cell == Cell::Lstm ? kLstm[k] : k;
}

// W [D, G*H, I] (or R, I = H) as oneDNN's ldigo [1, D, I, G, H] in its gate order.
Tensor ldigo(const Tensor& w, Cell cell, int64_t dirs, int64_t in, int64_t h) {
  const int64_t g = gate_count(cell);
  Tensor out = allocate_tensor(DType::Float, {1, dirs, in, g, h});
  const float* src = w.data<float>();
  float* dst = out.data<float>();
  for (int64_t d = 0; d < dirs; ++d)
    for (int64_t k = 0; k < g; ++k) {
      const float* rows = src + (d * g + onnx_gate(cell, k)) * h * in;
      for (int64_t o = 0; o < h; ++o)
        for (int64_t i = 0; i < in; ++i) dst[((d * in + i) * g + k) * h + o] = rows[o * in + i];
    }
  return out;
}

// B [D, 2*G*H] (input biases, then recurrence biases) as oneDNN's ldgo: their sum per gate;
// for linear_before_reset GRU a fourth gate holds the candidate's recurrence bias apart, since
// the reset gate multiplies it.
Tensor bias_ldgo(const Tensor* b, Cell cell, bool lbr, int64_t dirs, int64_t h) {
  const int64_t g = gate_count(cell), gb = lbr ? g + 1 : g;
  Tensor out = allocate_tensor(DType::Float, {1, dirs, gb, h});
  float* dst = out.data<float>();
  std::fill_n(dst, out.numel(), 0.0f);
  if (!b) return out;
  const float* src = b->data<float>();
  for (int64_t d = 0; d < dirs; ++d) {
    const float* wb = src + d * 2 * g * h;
    const float* rb = wb + g * h;
    for (int64_t k = 0; k < g; ++k) {
      const int64_t og = onnx_gate(cell, k);
      for (int64_t o = 0; o < h; ++o)
        dst[(d * gb + k) * h + o] = wb[og * h + o] + (lbr && k == 2 ? 0.0f : rb[og * h + o]);
    }
    if (lbr)
      for (int64_t o = 0; o < h; ++o) dst[(d * gb + 3) * h + o] = rb[2 * h + o];
  }
  return out;
}

// P [D, 3*H] (i, o, f) as oneDNN's ldgo peephole weights (i, f, o).
Tensor peephole_ldgo(const Tensor& p, int64_t dirs, int64_t h) {
  static constexpr int64_t kOnnx[3] = {0, 2, 1};
  Tensor out = allocate_tensor(DType::Float, {1, dirs, 3, h});
  const float* src = p.data<float>();
  float* dst = out.data<float>();
  for (int64_t d = 0; d < dirs; ++d)
    for (int64_t k = 0; k < 3; ++k)
      for (int64_t o = 0; o < h; ++o) dst[(d * 3 + k) * h + o] = src[(d * 3 + kOnnx[k]) * h + o];
  return out;
}

// A state [D, N, H] (layout 0) or [N, D, H] (layout 1) as ldnc [1, D, N, H].
dnnl::memory::desc state_md(int64_t dirs, int64_t batch, int64_t h, int64_t layout) {
  if (layout == 0) return dnnl::memory::desc({1, dirs, batch, h}, f32, tag::ldnc);
  return dnnl_adapter::strided_md({1, dirs, batch, h}, {dirs * batch * h, h, dirs * h, 1}, f32);
}

Tensor packed(const Tensor& plain, const dnnl::memory::desc& plain_md,
              const dnnl::memory::desc& want) {
  if (want == plain_md) return plain;
  Tensor out = allocate_tensor(DType::UInt8, {static_cast<int64_t>(want.get_size())});
  dnnl_adapter::reorder_now(plain_md, plain.raw(), want, out.raw());
  return out;
}

// The node's weights in oneDNN's plain layouts and gate order (W and R as ldigo).
RecurrentState::Weights plain_weights(const Geometry& g, const RecurrentSpec& spec, const Tensor& w,
                                      const Tensor& r, const Tensor* b, const Tensor* p) {
  RecurrentState::Weights out;
  out.layer = ldigo(w, spec.cell, spec.dirs, g.in, g.hidden);
  out.iter = ldigo(r, spec.cell, spec.dirs, g.hidden, g.hidden);
  out.bias = bias_ldgo(b, spec.cell, g.lbr, spec.dirs, g.hidden);
  if (p) out.peephole = peephole_ldgo(*p, spec.dirs, g.hidden);
  return out;
}

// Plain weights in the layouts `layer` and `iter` a primitive reads (bias and peepholes as
// they are).
RecurrentState::Weights packed_for(const RecurrentState::Weights& plain, const Geometry& g,
                                   const RecurrentSpec& spec, const dnnl::memory::desc& layer,
                                   const dnnl::memory::desc& iter) {
  const int64_t dirs = spec.dirs, gates = gate_count(spec.cell), h = g.hidden;
  RecurrentState::Weights out = plain;
  out.layer =
      packed(plain.layer, dnnl::memory::desc({1, dirs, g.in, gates, h}, f32, tag::ldigo), layer);
  out.iter = packed(plain.iter, dnnl::memory::desc({1, dirs, h, gates, h}, f32, tag::ldigo), iter);
  return out;
}

// Checks what oneDNN computes and describes the node's tensors; throws KernelUnsupported (with
// the reason) otherwise. Inputs 0-7 are the forward node's, for RecurrentGrad too.
// With `staged` (training), the data and states are described as oneDNN's plain tnc and ldnc,
// the initial states always present: the kernel copies them there. oneDNN 2.6's left-to-right
// backward computes wrong weight gradients from batch-first data or without initial states,
// where the other directions are right (tests/gradcheck/recurrent_backward_test.cpp).
Geometry describe(InferContext& ctx, const RecurrentSpec& spec, bool staged) {
  if (!spec.primitive_cell)
    throw KernelUnsupported{"activations, clip or input_forget oneDNN does not compute"};
  for (size_t i = 0; i < ctx.input_count(); ++i)
    if (ctx.has_input(i) && i != 4 && ctx.dtype(i) != DType::Float)
      throw KernelUnsupported{std::string("dtype ") + dtype_name(ctx.dtype(i))};
  const Tensor* w = ctx.input_tensor(1);
  const Tensor* r = ctx.input_tensor(2);
  const Tensor* b = ctx.has_input(3) ? ctx.input_tensor(3) : nullptr;
  Geometry g;
  g.peepholes = spec.cell == Cell::Lstm && ctx.has_input(7);
  const Tensor* p = g.peepholes ? ctx.input_tensor(7) : nullptr;
  g.constant_weights = w && r && (!ctx.has_input(3) || b) && (!g.peepholes || p);
  const Shape& x = ctx.shape(0);
  g.seq = spec.layout ? x[1] : x[0];
  g.batch = spec.layout ? x[0] : x[1];
  g.in = x[2];
  g.hidden = spec.hidden ? spec.hidden : ctx.shape(2)[2];
  const int64_t t = g.seq, n = g.batch, in = g.in, h = g.hidden, dirs = spec.dirs,
                gates = gate_count(spec.cell);
  if (t == 0 || n == 0 || in == 0 || h == 0) throw KernelUnsupported{"empty"};
  // The reference loop checks these with messages naming the node; it runs on a mismatch.
  auto numel = [&](size_t i) { return numel_of(ctx.shape(i)); };
  if (numel(1) != dirs * gates * h * in || numel(2) != dirs * gates * h * h ||
      (ctx.has_input(3) && numel(3) != dirs * 2 * gates * h) ||
      (g.peepholes && numel(7) != dirs * 3 * h))
    throw KernelUnsupported{"weights of unexpected sizes"};
  if (ctx.has_input(4)) {  // every sequence at full length, or the reference loop
    const Tensor* lens = ctx.input_tensor(4);
    if (!lens || lens->dtype() != DType::Int32 || lens->numel() != n)
      throw KernelUnsupported{"sequence_lens known only at run time"};
    for (int64_t i = 0; i < n; ++i)
      if (lens->data<int32_t>()[i] != t) throw KernelUnsupported{"sequences of several lengths"};
  }
  g.lbr = spec.cell == Cell::Gru && spec.linear_before_reset;
  const bool batch_first = spec.layout && !staged;
  g.src_layer = dnnl::memory::desc({t, n, in}, f32, batch_first ? tag::ntc : tag::tnc);
  const int64_t state_layout = staged ? 0 : spec.layout;
  if (ctx.has_input(5) || staged) g.src_iter = state_md(dirs, n, h, state_layout);
  if (spec.cell == Cell::Lstm && (ctx.has_input(6) || staged))
    g.src_iter_c = state_md(dirs, n, h, state_layout);
  g.bias = dnnl::memory::desc({1, dirs, g.lbr ? gates + 1 : gates, h}, f32, tag::ldgo);
  if (g.peepholes) g.peephole = dnnl::memory::desc({1, dirs, 3, h}, f32, tag::ldgo);
  g.dst_layer = dnnl::memory::desc({t, n, dirs * h}, f32, tag::tnc);
  g.dst_iter = dnnl::memory::desc({1, dirs, n, h}, f32, tag::ldnc);
  if (spec.cell == Cell::Lstm) g.dst_iter_c = g.dst_iter;
  g.direction = dirs == 2      ? dnnl::rnn_direction::bidirectional_concat
                : spec.reverse ? dnnl::rnn_direction::unidirectional_right2left
                               : dnnl::rnn_direction::unidirectional_left2right;
  return g;
}

// The forward primitive (and with `training`, its backward one) for this cell. The backward
// descriptors take the forward ones for the data and their gradients; the weights (read and
// written) in the layouts oneDNN picks.
Primitives make_primitives(const Geometry& g, const RecurrentSpec& spec, bool training) {
  const int64_t dirs = spec.dirs, gates = gate_count(spec.cell), in = g.in, h = g.hidden;
  const dnnl::memory::desc wl_any({1, dirs, in, gates, h}, f32, tag::any),
      wi_any({1, dirs, h, gates, h}, f32, tag::any);
  const auto kind =
      training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  const dnnl::primitive_attr attr = dnnl_adapter::scratch_attr();
  const auto& eng = dnnl_adapter::engine();
  Primitives out;
  // oneDNN 2.6 has no brgemm GRU: its "ref" RNN drives packed sgemm calls, not an elementwise
  // loop (speech_lstm_gru's GRU, 50 steps of 96 units: 0.39 ms), so it is taken.
  auto finish = [&](auto fwd_pd, auto make_bwd_pd) {
    out.forward = dnnl::primitive(fwd_pd);
    out.weights_layer = fwd_pd.weights_layer_desc();
    out.weights_iter = fwd_pd.weights_iter_desc();
    out.scratch = fwd_pd.scratchpad_desc();
    if (!training) return;
    out.workspace = fwd_pd.workspace_desc();
    auto bwd_pd = make_bwd_pd(fwd_pd);
    out.backward = dnnl::primitive(bwd_pd);
    out.bwd_weights_layer = bwd_pd.weights_layer_desc();
    out.bwd_weights_iter = bwd_pd.weights_iter_desc();
    out.diff_weights_layer = bwd_pd.diff_weights_layer_desc();
    out.diff_weights_iter = bwd_pd.diff_weights_iter_desc();
    if (bwd_pd.scratchpad_desc().get_size() > out.scratch.get_size())
      out.scratch = bwd_pd.scratchpad_desc();
  };
  const auto bwd = dnnl::prop_kind::backward;
  if (spec.cell == Cell::Lstm) {
    const auto fwd = g.peepholes
                         ? dnnl::lstm_forward::desc(kind, g.direction, g.src_layer, g.src_iter,
                                                    g.src_iter_c, wl_any, wi_any, g.peephole,
                                                    g.bias, g.dst_layer, g.dst_iter, g.dst_iter_c)
                         : dnnl::lstm_forward::desc(kind, g.direction, g.src_layer, g.src_iter,
                                                    g.src_iter_c, wl_any, wi_any, g.bias,
                                                    g.dst_layer, g.dst_iter, g.dst_iter_c);
    finish(dnnl::lstm_forward::primitive_desc(fwd, attr, eng), [&](const auto& hint) {
      const auto d =
          g.peepholes
              ? dnnl::lstm_backward::desc(bwd, g.direction, g.src_layer, g.src_iter, g.src_iter_c,
                                          wl_any, wi_any, g.peephole, g.bias, g.dst_layer,
                                          g.dst_iter, g.dst_iter_c, g.src_layer, g.src_iter,
                                          g.src_iter_c, wl_any, wi_any, g.peephole, g.bias,
                                          g.dst_layer, g.dst_iter, g.dst_iter_c)
              : dnnl::lstm_backward::desc(
                    bwd, g.direction, g.src_layer, g.src_iter, g.src_iter_c, wl_any, wi_any, g.bias,
                    g.dst_layer, g.dst_iter, g.dst_iter_c, g.src_layer, g.src_iter, g.src_iter_c,
                    wl_any, wi_any, g.bias, g.dst_layer, g.dst_iter, g.dst_iter_c);
      return dnnl::lstm_backward::primitive_desc(d, attr, eng, hint);
    });
  } else if (g.lbr) {
    const dnnl::lbr_gru_forward::desc fwd(kind, g.direction, g.src_layer, g.src_iter, wl_any,
                                          wi_any, g.bias, g.dst_layer, g.dst_iter);
    finish(dnnl::lbr_gru_forward::primitive_desc(fwd, attr, eng), [&](const auto& hint) {
      const dnnl::lbr_gru_backward::desc d(
          bwd, g.direction, g.src_layer, g.src_iter, wl_any, wi_any, g.bias, g.dst_layer,
          g.dst_iter, g.src_layer, g.src_iter, wl_any, wi_any, g.bias, g.dst_layer, g.dst_iter);
      return dnnl::lbr_gru_backward::primitive_desc(d, attr, eng, hint);
    });
  } else if (spec.cell == Cell::Gru) {
    const dnnl::gru_forward::desc fwd(kind, g.direction, g.src_layer, g.src_iter, wl_any, wi_any,
                                      g.bias, g.dst_layer, g.dst_iter);
    finish(dnnl::gru_forward::primitive_desc(fwd, attr, eng), [&](const auto& hint) {
      const dnnl::gru_backward::desc d(bwd, g.direction, g.src_layer, g.src_iter, wl_any, wi_any,
                                       g.bias, g.dst_layer, g.dst_iter, g.src_layer, g.src_iter,
                                       wl_any, wi_any, g.bias, g.dst_layer, g.dst_iter);
      return dnnl::gru_backward::primitive_desc(d, attr, eng, hint);
    });
  } else {
    const auto act = spec.rnn_activation == "Relu"      ? dnnl::algorithm::eltwise_relu
                     : spec.rnn_activation == "Sigmoid" ? dnnl::algorithm::eltwise_logistic
                                                        : dnnl::algorithm::eltwise_tanh;
    const dnnl::vanilla_rnn_forward::desc fwd(kind, act, g.direction, g.src_layer, g.src_iter,
                                              wl_any, wi_any, g.bias, g.dst_layer, g.dst_iter);
    finish(dnnl::vanilla_rnn_forward::primitive_desc(fwd, attr, eng), [&](const auto& hint) {
      const dnnl::vanilla_rnn_backward::desc d(
          bwd, act, g.direction, g.src_layer, g.src_iter, wl_any, wi_any, g.bias, g.dst_layer,
          g.dst_iter, g.src_layer, g.src_iter, wl_any, wi_any, g.bias, g.dst_layer, g.dst_iter);
      return dnnl::vanilla_rnn_backward::primitive_desc(d, attr, eng, hint);
    });
  }
  return out;
}

// Places the forward outputs after `bytes` of scratch: dst_layer, dst_iter, dst_iter_c.
void place_outputs(RecurrentState& st, const RecurrentSpec& spec, size_t& bytes) {
  st.dst_layer_offset = bytes;
  bytes += dnnl_adapter::align64(st.g.dst_layer.get_size());
  st.dst_iter_offset = bytes;
  bytes += dnnl_adapter::align64(st.g.dst_iter.get_size());
  st.dst_iter_c_offset = bytes;
  if (spec.cell == Cell::Lstm) bytes += dnnl_adapter::align64(st.g.dst_iter.get_size());
}

// The constant weights of the node (Geometry::constant_weights), plain.
RecurrentState::Weights constant_weights(InferContext& ctx, const Geometry& g,
                                         const RecurrentSpec& spec) {
  return plain_weights(g, spec, *ctx.input_tensor(1), *ctx.input_tensor(2),
                       ctx.has_input(3) ? ctx.input_tensor(3) : nullptr,
                       g.peepholes ? ctx.input_tensor(7) : nullptr);
}

// Direction d's block of a [1, D, ...] tensor, as [1, 1, ...].
Tensor direction_block(const Tensor& t, int64_t d) {
  Shape shape = t.shape();
  const int64_t dirs = shape[1];
  shape[1] = 1;
  Tensor out = allocate_tensor(t.dtype(), shape);
  const size_t bytes = t.nbytes() / static_cast<size_t>(dirs);
  std::memcpy(out.raw(), static_cast<const char*>(t.raw()) + static_cast<size_t>(d) * bytes, bytes);
  return out;
}

// Constant weights in the primitive's layouts, shared by every plan that wants the same layouts
// (a new sequence length builds a plan, and the weights do not depend on it): W and R are
// brought into oneDNN's gate order and layout once per session (dnnl_adapter::packed_weights).
// `direction` >= 0: that direction's weights alone, for a unidirectional primitive running one
// direction of a bidirectional node (runs_directions_apart), keyed by where its rows start in W
// and R.
RecurrentState::Weights shared_constant_weights(InferContext& ctx, const Geometry& g,
                                                const RecurrentSpec& spec, const Primitives& p,
                                                int64_t direction = -1) {
  const bool one = direction >= 0;
  const int64_t dirs = one ? 1 : spec.dirs, gates = gate_count(spec.cell), h = g.hidden;
  const dnnl::memory::desc layer_ldigo({1, dirs, g.in, gates, h}, f32, tag::ldigo),
      iter_ldigo({1, dirs, h, gates, h}, f32, tag::ldigo);
  const Tensor &w = *ctx.input_tensor(1), &r = *ctx.input_tensor(2);
  const int64_t d = one ? direction : 0;
  const void* w_rows = w.data<float>() + d * gates * h * g.in;
  const void* r_rows = r.data<float>() + d * gates * h * h;
  auto& cache = dnnl_adapter::packed_weights();
  std::optional<Tensor> layer = cache.find(w_rows, w.owner(), layer_ldigo, p.weights_layer),
                        iter = cache.find(r_rows, r.owner(), iter_ldigo, p.weights_iter);
  auto mine = [&](const Tensor& all) { return one ? direction_block(all, d) : all; };
  RecurrentState::Weights out;
  if (layer && iter) {
    out.layer = std::move(*layer);
    out.iter = std::move(*iter);
    out.bias = mine(bias_ldgo(ctx.has_input(3) ? ctx.input_tensor(3) : nullptr, spec.cell, g.lbr,
                              spec.dirs, g.hidden));
    if (g.peepholes) out.peephole = mine(peephole_ldgo(*ctx.input_tensor(7), spec.dirs, g.hidden));
    return out;
  }
  const RecurrentState::Weights plain = constant_weights(ctx, g, spec);
  out.layer = packed(mine(plain.layer), layer_ldigo, p.weights_layer);
  out.iter = packed(mine(plain.iter), iter_ldigo, p.weights_iter);
  out.bias = mine(plain.bias);
  if (g.peepholes) out.peephole = mine(plain.peephole);
  cache.count_pack();
  cache.remember(w_rows, w.owner(), layer_ldigo, p.weights_layer, out.layer);
  cache.remember(r_rows, r.owner(), iter_ldigo, p.weights_iter, out.iter);
  return out;
}

// Whether a bidirectional node runs its directions side by side, one thread each, instead of as
// oneDNN's bidirectional primitive on the session's two threads: the recurrence is a chain of
// small products that two threads split poorly, where the directions are independent
// (speech_lstm_gru's second LSTM, 50 steps of 128 units at batch 1: 1.25 ms as one primitive,
// 0.77 ms as two side by side). Measured with two threads only: with more, each direction would
// get one and the rest would idle. Time-major data (layout 0) and constant weights.
bool runs_directions_apart(const InferContext& ctx, const RecurrentSpec& spec, const Geometry& g) {
  return spec.dirs == 2 && spec.layout == 0 && ctx.threads() == 2 && g.constant_weights;
}

// Direction d of a node (d = 1: right to left) as a unidirectional primitive over `steps` of the
// sequence (0: all of it); a chunk (steps > 0) always takes and gives initial states. The
// primitive runs left to right either way: right to left reads X in reverse time order and
// writes its outputs so (reversed around it at run time), which lets both directions share one
// primitive, `shared` when given: each one a bidirectional layer made cost 0.5-1 ms of code
// generation, twice (a recognizer's first plan for several widths made 14 for its chunks).
std::shared_ptr<RecurrentState> prepare_direction(InferContext& ctx, const RecurrentSpec& spec,
                                                  const Geometry& both, int64_t d,
                                                  int64_t steps = 0,
                                                  const Primitives* shared = nullptr) {
  auto st = std::make_shared<RecurrentState>();
  RecurrentSpec one = spec;
  one.dirs = 1;
  Geometry& g = st->g;
  g = both;
  const int64_t n = g.batch, h = g.hidden, gates = gate_count(spec.cell);
  if (steps > 0) {
    g.seq = steps;
    g.src_layer = dnnl::memory::desc({steps, n, g.in}, f32, tag::tnc);
    g.src_iter = state_md(1, n, h, 0);
    if (spec.cell == Cell::Lstm) g.src_iter_c = g.src_iter;
  }
  if (!g.src_iter.is_zero()) g.src_iter = state_md(1, n, h, 0);
  if (!g.src_iter_c.is_zero()) g.src_iter_c = state_md(1, n, h, 0);
  g.bias = dnnl::memory::desc({1, 1, g.lbr ? gates + 1 : gates, h}, f32, tag::ldgo);
  if (g.peepholes) g.peephole = dnnl::memory::desc({1, 1, 3, h}, f32, tag::ldgo);
  g.dst_layer = dnnl::memory::desc({g.seq, n, h}, f32, tag::tnc);
  g.dst_iter = dnnl::memory::desc({1, 1, n, h}, f32, tag::ldnc);
  if (spec.cell == Cell::Lstm) g.dst_iter_c = g.dst_iter;
  g.direction = dnnl::rnn_direction::unidirectional_left2right;
  st->p = shared ? *shared : make_primitives(g, one, false);
  st->weights = shared_constant_weights(ctx, both, spec, st->p, spec.dirs == 2 ? d : -1);
  return st;
}

// X [T, N, I] in reverse time order: its bytes, and the copy.
size_t reversed_x_bytes(const Geometry& g) {
  return dnnl_adapter::align64(static_cast<size_t>(g.seq * g.batch * g.in) * sizeof(float));
}
const float* reverse_time(const float* x, float* out, int64_t t, int64_t row) {
  for (int64_t s = 0; s < t; ++s) std::copy_n(x + (t - 1 - s) * row, row, out + s * row);
  return out;
}

// The chunks a sequence of t steps runs as: of 64 steps while they last, then the binary digits
// of the rest (200 = 64 + 64 + 64 + 8). Seven lengths serve every t, at most seven chunks past
// the 64s.
constexpr int64_t kLongestChunk = 64;

std::vector<int64_t> chunk_lengths(int64_t t) {
  constexpr int64_t kLongest = kLongestChunk;
  std::vector<int64_t> out(static_cast<size_t>(t / kLongest), kLongest);
  for (int64_t len = kLongest / 2; len >= 1; len /= 2)
    if (t % kLongest & len) out.push_back(len);
  return out;
}

// The unidirectional primitive for chunks of `steps` of direction d, from the node's memo (made
// and kept there on first use): it depends on the batch and the weights, not on the length.
std::shared_ptr<const RecurrentState> chunk_primitive(InferContext& ctx, const RecurrentSpec& spec,
                                                      const Geometry& g, int64_t d, int64_t steps) {
  // (By direction, length, batch and the weights: what the state holds.)
  auto key_of = [&](int64_t direction) {
    std::string key = "rnn chunk";
    const int64_t words[] = {
        steps, direction, g.batch,
        static_cast<int64_t>(reinterpret_cast<uintptr_t>(ctx.input_tensor(1)->raw()))};
    key.append(reinterpret_cast<const char*>(words), sizeof words);
    return key;
  };
  const std::string key = key_of(d);
  if (auto kept = ctx.memo()->find(key))
    return std::static_pointer_cast<const RecurrentState>(kept);
  // The other direction's chunk of this length, if made: its primitive serves this one too.
  auto twin = std::static_pointer_cast<const RecurrentState>(ctx.memo()->find(key_of(1 - d)));
  auto st = prepare_direction(ctx, spec, g, d, steps, twin ? &twin->p : nullptr);
  ctx.memo()->keep(key, st);
  return st;
}

// Whether the node runs as chunks (RecurrentState::chunked): a plan for one of several lengths,
// time-major data, constant weights.
bool runs_in_chunks(const InferContext& ctx, const RecurrentSpec& spec, const Geometry& g) {
  return ctx.shapes_vary() && ctx.memo() && spec.layout == 0 && g.constant_weights;
}

std::shared_ptr<RecurrentState> prepare_chunked(InferContext& ctx, const RecurrentSpec& spec,
                                                const Geometry& g) {
  auto st = std::make_shared<RecurrentState>();
  st->g = g;
  const size_t state_bytes = dnnl_adapter::align64(static_cast<size_t>(2 * g.batch * g.hidden) *
                                                   sizeof(float));  // h and c
  size_t bytes = 0;
  for (int64_t d = 0; d < spec.dirs; ++d) {
    const int64_t direction = spec.dirs == 2 ? d : (spec.reverse ? 1 : 0);
    RecurrentState::ChunkedDirection& cd = st->chunked.emplace_back();
    // Every chunk length at once, the first time (a memo lookup after): each new length would
    // otherwise make the chunks its binary digits need that earlier lengths did not, 0.3 ms of
    // code generation each and direction (a text-line recognizer's first run at a width of 120
    // after 64 made three per direction: 4.4x its steady run). Made here, they cost the first plan
    // for several lengths, which makes the node's other primitives anyway.
    for (int64_t steps = 1; steps <= kLongestChunk; steps *= 2)
      chunk_primitive(ctx, spec, g, direction, steps);
    int64_t start = 0;
    size_t own = 0;
    for (const int64_t steps : chunk_lengths(g.seq)) {
      cd.chunks.push_back({start, steps, chunk_primitive(ctx, spec, g, direction, steps)});
      own = std::max(own, cd.chunks.back().primitive->p.scratch.get_size());
      start += steps;
    }
    cd.reversed = direction == 1;
    cd.region = bytes;
    cd.layer = dnnl_adapter::align64(own);
    cd.slots[0] = cd.layer + dnnl_adapter::align64(static_cast<size_t>(g.seq * g.batch * g.hidden) *
                                                   sizeof(float));
    cd.slots[1] = cd.slots[0] + state_bytes;
    cd.reversed_x = cd.slots[1] + state_bytes;
    bytes += cd.reversed_x + (cd.reversed ? reversed_x_bytes(g) : 0);
  }
  ctx.request_scratch(bytes);
  return st;
}

std::shared_ptr<RecurrentState> prepare(InferContext& ctx, const RecurrentSpec& spec) {
  auto st = std::make_shared<RecurrentState>();
  st->g = describe(ctx, spec, false);
  if (runs_in_chunks(ctx, spec, st->g)) return prepare_chunked(ctx, spec, st->g);
  if (runs_directions_apart(ctx, spec, st->g)) {
    size_t bytes = 0;
    for (int64_t d = 0; d < 2; ++d) {
      st->directions.push_back(
          prepare_direction(ctx, spec, st->g, d, 0, d == 1 ? &st->directions[0]->p : nullptr));
      RecurrentState& one = *st->directions.back();
      st->direction_scratch.push_back(bytes);
      size_t own = dnnl_adapter::align64(one.p.scratch.get_size());
      place_outputs(one, spec, own);
      own = dnnl_adapter::align64(own);
      one.reversed_x_offset = own;
      if (d == 1) own += reversed_x_bytes(one.g);
      bytes += own;
    }
    ctx.request_scratch(bytes);
    return st;
  }
  st->p = make_primitives(st->g, spec, false);
  if (st->g.constant_weights) st->weights = shared_constant_weights(ctx, st->g, spec, st->p);
  size_t bytes = dnnl_adapter::align64(st->p.scratch.get_size());
  place_outputs(*st, spec, bytes);
  ctx.request_scratch(bytes);
  return st;
}

// oneDNN's [1, D, N, H] state into the output's [D, N, H] (layout 0) or [N, D, H] (layout 1),
// or back (`to_onednn`).
void move_state(const float* src, float* dst, int64_t dirs, int64_t n, int64_t h, int64_t layout,
                bool to_onednn) {
  for (int64_t d = 0; d < dirs; ++d)
    for (int64_t b = 0; b < n; ++b) {
      const int64_t onednn = (d * n + b) * h, node = (layout ? b * dirs + d : d * n + b) * h;
      std::copy_n(src + (to_onednn ? node : onednn), h, dst + (to_onednn ? onednn : node));
    }
}

// Y [T, D, N, H] (layout 0) or [N, T, D, H] (layout 1) from oneDNN's [T, N, D*H], or back.
void move_sequence(const float* src, float* dst, int64_t t, int64_t n, int64_t dirs, int64_t h,
                   int64_t layout, bool to_onednn) {
#pragma omp parallel for if (t * n * dirs * h > 65536)
  for (int64_t s = 0; s < t; ++s)
    for (int64_t b = 0; b < n; ++b)
      for (int64_t d = 0; d < dirs; ++d) {
        const int64_t onednn = (s * n + b) * dirs * h + d * h,
                      node = (layout ? (b * t + s) * dirs + d : (s * dirs + d) * n + b) * h;
        std::copy_n(src + (to_onednn ? node : onednn), h, dst + (to_onednn ? onednn : node));
      }
}

// The data a forward primitive reads: X and the initial states (nullptr: none); and where it
// writes: the sequence and the final states.
struct Sources {
  const void *layer = nullptr, *iter = nullptr, *iter_c = nullptr;
};
struct Destinations {
  void *layer = nullptr, *iter = nullptr, *iter_c = nullptr;
};

// Where the forward primitive writes in the node's scratch (place_outputs).
Destinations scratch_outputs(const RecurrentState& st, char* scratch) {
  return {scratch + st.dst_layer_offset, scratch + st.dst_iter_offset,
          scratch + st.dst_iter_c_offset};
}

// The arguments of the forward primitive for this run.
dnnl_adapter::Args forward_args(const RecurrentState& st, const RecurrentSpec& spec,
                                const Sources& src, const RecurrentState::Weights& weights,
                                const Destinations& dst) {
  const Geometry& g = st.g;
  dnnl_adapter::Args args = {{DNNL_ARG_SRC_LAYER, g.src_layer, src.layer},
                             {DNNL_ARG_WEIGHTS_LAYER, st.p.weights_layer, weights.layer.raw()},
                             {DNNL_ARG_WEIGHTS_ITER, st.p.weights_iter, weights.iter.raw()},
                             {DNNL_ARG_BIAS, g.bias, weights.bias.raw()},
                             {DNNL_ARG_DST_LAYER, g.dst_layer, dst.layer},
                             {DNNL_ARG_DST_ITER, g.dst_iter, dst.iter}};
  if (src.iter) args.add(DNNL_ARG_SRC_ITER, g.src_iter, src.iter);
  if (spec.cell == Cell::Lstm) {
    if (src.iter_c) args.add(DNNL_ARG_SRC_ITER_C, g.src_iter_c, src.iter_c);
    if (g.peepholes) args.add(DNNL_ARG_WEIGHTS_PEEPHOLE, g.peephole, weights.peephole.raw());
    args.add(DNNL_ARG_DST_ITER_C, g.dst_iter_c, dst.iter_c);
  }
  return args;
}

// The weights fed at run time (training), plain.
RecurrentState::Weights fed_weights(const Geometry& g, const RecurrentSpec& spec, RunContext& ctx) {
  return plain_weights(g, spec, ctx.input(1), ctx.input(2),
                       ctx.has_input(3) ? &ctx.input(3) : nullptr,
                       g.peepholes ? &ctx.input(7) : nullptr);
}

// RecurrentGrad on oneDNN: the forward primitive for training (its workspace keeps each step's
// gates), then the backward one; the buffers they exchange in the node's scratch.
struct RecurrentGradState {
  RecurrentState fwd;
  RecurrentState::Weights bwd_weights;  // constants: packed once for the backward primitive
  size_t src_layer = 0, src_iter = 0, src_iter_c = 0, workspace = 0, diff_dst_layer = 0,
         diff_dst_iter = 0, diff_dst_iter_c = 0, diff_src_layer = 0, diff_src_iter = 0,
         diff_src_iter_c = 0, diff_weights_layer = 0, diff_weights_iter = 0, diff_bias = 0,
         diff_peephole = 0, diff_end = 0;
};

// RecurrentGrad's inputs after the forward node's 8, and its outputs.
enum GradInput : size_t { kDY = 8, kDYh = 9, kDYc = 10 };
enum GradOutput : size_t { kDX, kDW, kDR, kDB, kDH0, kDC0, kDP };

std::shared_ptr<RecurrentGradState> prepare_grad(InferContext& ctx, const RecurrentSpec& spec) {
  auto st = std::make_shared<RecurrentGradState>();
  RecurrentState& f = st->fwd;
  f.g = describe(ctx, spec, true);
  f.p = make_primitives(f.g, spec, true);
  const Geometry& g = f.g;
  if (g.constant_weights) {  // a frozen recurrent layer that other weights train through
    const RecurrentState::Weights plain = constant_weights(ctx, g, spec);
    f.weights = packed_for(plain, g, spec, f.p.weights_layer, f.p.weights_iter);
    st->bwd_weights = packed_for(plain, g, spec, f.p.bwd_weights_layer, f.p.bwd_weights_iter);
  }
  size_t bytes = dnnl_adapter::align64(f.p.scratch.get_size());
  place_outputs(f, spec, bytes);
  auto place = [&](size_t& offset, size_t size) {
    offset = bytes;
    bytes += dnnl_adapter::align64(size);
  };
  place(st->src_layer, spec.layout ? g.src_layer.get_size() : 0);
  place(st->src_iter, g.src_iter.get_size());
  place(st->src_iter_c, g.src_iter_c.get_size());
  place(st->workspace, f.p.workspace.get_size());
  place(st->diff_dst_layer, g.dst_layer.get_size());
  place(st->diff_dst_iter, g.dst_iter.get_size());
  place(st->diff_dst_iter_c, g.dst_iter_c.get_size());
  place(st->diff_src_layer, g.src_layer.get_size());
  place(st->diff_src_iter, g.src_iter.get_size());
  place(st->diff_src_iter_c, g.src_iter_c.get_size());
  // The weight gradients, which the backward primitive adds to: zeroed in one fill each run.
  place(st->diff_weights_layer, f.p.diff_weights_layer.get_size());
  place(st->diff_weights_iter, f.p.diff_weights_iter.get_size());
  place(st->diff_bias, g.bias.get_size());
  place(st->diff_peephole, g.peephole.get_size());
  st->diff_end = bytes;
  ctx.request_scratch(bytes);
  return st;
}

// oneDNN's ldigo [1, D, I, G, H] gradient (its gate order) as ONNX's [D, G*H, I].
void from_ldigo(const float* src, float* dst, Cell cell, int64_t dirs, int64_t in, int64_t h) {
  const int64_t g = gate_count(cell);
  for (int64_t d = 0; d < dirs; ++d)
    for (int64_t k = 0; k < g; ++k) {
      float* rows = dst + (d * g + onnx_gate(cell, k)) * h * in;
      for (int64_t o = 0; o < h; ++o)
        for (int64_t i = 0; i < in; ++i) rows[o * in + i] = src[((d * in + i) * g + k) * h + o];
    }
}

// A weight gradient from the layout the backward primitive wrote into ONNX's.
void write_weight_grad(const dnnl::memory::desc& md, const void* src, Tensor& out, Cell cell,
                       int64_t dirs, int64_t in, int64_t h) {
  const dnnl::memory::desc plain({1, dirs, in, gate_count(cell), h}, f32, tag::ldigo);
  const void* ldigo_data = src;
  Tensor staged;
  if (md != plain) {
    staged = allocate_tensor(DType::Float, {1, dirs, in, gate_count(cell), h});
    dnnl_adapter::reorder_now(md, src, plain, staged.raw());
    ldigo_data = staged.raw();
  }
  from_ldigo(static_cast<const float*>(ldigo_data), out.data<float>(), cell, dirs, in, h);
}

// The summed ldgo bias gradient as ONNX's [D, 2*G*H]: each gate's input and recurrence biases
// get the same gradient, but for linear_before_reset GRU's candidate recurrence bias (gate 3).
void write_bias_grad(const float* src, Tensor& out, Cell cell, bool lbr, int64_t dirs, int64_t h) {
  const int64_t g = gate_count(cell), gb = lbr ? g + 1 : g;
  float* dst = out.data<float>();
  for (int64_t d = 0; d < dirs; ++d)
    for (int64_t k = 0; k < g; ++k) {
      const int64_t og = onnx_gate(cell, k), rk = lbr && k == 2 ? 3 : k;
      for (int64_t o = 0; o < h; ++o) {
        dst[d * 2 * g * h + og * h + o] = src[(d * gb + k) * h + o];
        dst[d * 2 * g * h + (g + og) * h + o] = src[(d * gb + rk) * h + o];
      }
    }
}

// oneDNN's ldgo peephole gradient (i, f, o) as ONNX's P [D, 3*H] (i, o, f).
void write_peephole_grad(const float* src, Tensor& out, int64_t dirs, int64_t h) {
  static constexpr int64_t kOnnx[3] = {0, 2, 1};
  float* dst = out.data<float>();
  for (int64_t d = 0; d < dirs; ++d)
    for (int64_t k = 0; k < 3; ++k)
      std::copy_n(src + (d * 3 + k) * h, h, dst + (d * 3 + kOnnx[k]) * h);
}

void zero_output(RunContext& ctx, size_t o) {
  if (o < ctx.output_count() && ctx.has_output(o)) {
    Tensor& t = ctx.output(o);
    std::fill_n(static_cast<char*>(t.raw()), t.nbytes(), 0);
  }
}

}  // namespace

std::shared_ptr<void> prepare_dnnl_recurrent(InferContext& ctx, const RecurrentSpec& spec) {
  try {
    return prepare(ctx, spec);
  } catch (const dnnl::error& e) {
    throw KernelUnsupported{std::string("oneDNN: ") + e.what()};
  }
}

// body(d) for each of `dirs` directions, side by side on two threads when `apart`; an exception
// from either is rethrown once both are done (nothing may leave an OpenMP region by one).
template <class Body>
void for_each_direction(int64_t dirs, bool apart, Body&& body) {
  std::exception_ptr failed[2];
  parallel_for(dirs, apart && dirs == 2, [&](int64_t d) {
    try {
      body(d);
    } catch (...) {
      failed[d] = std::current_exception();
    }
  });
  for (const auto& e : failed)
    if (e) std::rethrow_exception(e);
}

// Direction d's results into the node's outputs: its sequence [T, N, H] into Y [T, D, N, H], its
// final states into Y_h and Y_c [D, N, H].
// (`reversed`: the sequence is in reverse time order.)
void write_direction(RunContext& ctx, const RecurrentSpec& spec, int64_t d, int64_t t, int64_t n,
                     int64_t h, const float* layer, const float* h_final, const float* c_final,
                     bool reversed) {
  const int64_t dirs = spec.dirs;
  if (ctx.has_output(0)) {
    float* y = ctx.output(0).data<float>();
    for (int64_t s = 0; s < t; ++s)
      std::copy_n(layer + (reversed ? t - 1 - s : s) * n * h, n * h, y + (s * dirs + d) * n * h);
  }
  if (ctx.has_output(1)) std::copy_n(h_final, n * h, ctx.output(1).data<float>() + d * n * h);
  if (spec.cell == Cell::Lstm && ctx.has_output(2))
    std::copy_n(c_final, n * h, ctx.output(2).data<float>() + d * n * h);
}

// runs_directions_apart's run: each direction on its own thread (oneDNN runs a primitive on the
// calling thread alone inside a parallel region), then the outputs interleaved into Y [T, 2, N,
// H], Y_h and Y_c [2, N, H].
void run_directions_apart(const RecurrentState& st, RunContext& ctx, const RecurrentSpec& spec) {
  char* scratch = static_cast<char*>(ctx.scratch());
  const int64_t t = st.g.seq, n = st.g.batch, h = st.g.hidden;
  const float* h0 = ctx.has_input(5) ? ctx.input(5).data<float>() : nullptr;
  const float* c0 = ctx.has_input(6) ? ctx.input(6).data<float>() : nullptr;
  for_each_direction(2, true, [&](int64_t d) {
    const RecurrentState& one = *st.directions[static_cast<size_t>(d)];
    char* own = scratch + st.direction_scratch[static_cast<size_t>(d)];
    const float* x = ctx.input(0).data<float>();
    if (d == 1)
      x = reverse_time(x, reinterpret_cast<float*>(own + one.reversed_x_offset), t, n * one.g.in);
    const Sources src{x, h0 ? h0 + d * n * h : nullptr, c0 ? c0 + d * n * h : nullptr};
    dnnl_adapter::guarded(ctx.node(), [&] {
      dnnl_adapter::execute(one.p.forward,
                            forward_args(one, spec, src, one.weights, scratch_outputs(one, own)),
                            one.p.scratch, own);
      return 0;
    });
  });
  for (int64_t d = 0; d < 2; ++d) {
    const RecurrentState& one = *st.directions[static_cast<size_t>(d)];
    const char* own = scratch + st.direction_scratch[static_cast<size_t>(d)];
    auto at = [&](size_t offset) { return reinterpret_cast<const float*>(own + offset); };
    write_direction(ctx, spec, d, t, n, h, at(one.dst_layer_offset), at(one.dst_iter_offset),
                    at(one.dst_iter_c_offset), d == 1);
  }
}

// RecurrentState::chunked's run: each direction's chunks in turn, passing the state on through
// two slots; the two directions of a bidirectional node side by side on two threads (as
// run_directions_apart), then the outputs into Y [T, D, N, H], Y_h and Y_c [D, N, H].
void run_chunked(const RecurrentState& st, RunContext& ctx, const RecurrentSpec& spec) {
  char* scratch = static_cast<char*>(ctx.scratch());
  const int64_t t = st.g.seq, n = st.g.batch, h = st.g.hidden, in = st.g.in, dirs = spec.dirs;
  const bool lstm = spec.cell == Cell::Lstm;
  const float* x = ctx.input(0).data<float>();
  const float* h0 = ctx.has_input(5) ? ctx.input(5).data<float>() : nullptr;
  const float* c0 = ctx.has_input(6) ? ctx.input(6).data<float>() : nullptr;
  auto slot = [&](const RecurrentState::ChunkedDirection& cd, int k) {
    return reinterpret_cast<float*>(scratch + cd.region + cd.slots[k]);
  };
  // The slot that holds a direction's final state: chunks alternate between the two.
  auto final_slot = [&](const RecurrentState::ChunkedDirection& cd) {
    return static_cast<int>(cd.chunks.size() % 2);
  };
  for_each_direction(dirs, ctx.threads() >= 2, [&](int64_t d) {
    const auto& cd = st.chunked[static_cast<size_t>(d)];
    char* own = scratch + cd.region;
    float* state = slot(cd, 0);
    if (h0)
      std::copy_n(h0 + d * n * h, n * h, state);
    else
      std::fill_n(state, n * h, 0.0f);
    if (lstm && c0)
      std::copy_n(c0 + d * n * h, n * h, state + n * h);
    else if (lstm)
      std::fill_n(state + n * h, n * h, 0.0f);
    float* layer = reinterpret_cast<float*>(own + cd.layer);
    const float* xd =
        cd.reversed ? reverse_time(x, reinterpret_cast<float*>(own + cd.reversed_x), t, n * in) : x;
    int from = 0;
    for (const auto& chunk : cd.chunks) {
      const RecurrentState& one = *chunk.primitive;
      float *src = slot(cd, from), *dst = slot(cd, 1 - from);
      const Sources in_chunk{xd + chunk.start * n * in, src, lstm ? src + n * h : nullptr};
      const Destinations out_chunk{layer + chunk.start * n * h, dst, lstm ? dst + n * h : nullptr};
      dnnl_adapter::guarded(ctx.node(), [&] {
        dnnl_adapter::execute(one.p.forward,
                              forward_args(one, spec, in_chunk, one.weights, out_chunk),
                              one.p.scratch, own);
        return 0;
      });
      from = 1 - from;
    }
  });
  for (int64_t d = 0; d < dirs; ++d) {
    const auto& cd = st.chunked[static_cast<size_t>(d)];
    const float* state = slot(cd, final_slot(cd));
    write_direction(ctx, spec, d, t, n, h,
                    reinterpret_cast<const float*>(scratch + cd.region + cd.layer), state,
                    state + n * h, cd.reversed);
  }
}

void run_dnnl_recurrent(const void* state, RunContext& ctx, const RecurrentSpec& spec) {
  const auto& st = *static_cast<const RecurrentState*>(state);
  if (!st.chunked.empty()) return run_chunked(st, ctx, spec);
  if (!st.directions.empty()) return run_directions_apart(st, ctx, spec);
  char* scratch = static_cast<char*>(ctx.scratch());
  const bool fed = !st.g.constant_weights;  // weights fed at run time, packed for this run
  const RecurrentState::Weights weights = fed ? packed_for(fed_weights(st.g, spec, ctx), st.g, spec,
                                                           st.p.weights_layer, st.p.weights_iter)
                                              : st.weights;
  dnnl_adapter::guarded(ctx.node(), [&] {
    const Sources src{ctx.input(0).raw(), ctx.has_input(5) ? ctx.input(5).raw() : nullptr,
                      ctx.has_input(6) ? ctx.input(6).raw() : nullptr};
    dnnl_adapter::execute(st.p.forward,
                          forward_args(st, spec, src, weights, scratch_outputs(st, scratch)),
                          st.p.scratch, scratch);
    return 0;
  });
  const int64_t t = st.g.seq, n = st.g.batch, h = st.g.hidden, dirs = spec.dirs;
  auto at = [&](size_t offset) { return reinterpret_cast<float*>(scratch + offset); };
  if (ctx.has_output(0))
    move_sequence(at(st.dst_layer_offset), ctx.output(0).data<float>(), t, n, dirs, h, spec.layout,
                  false);
  if (ctx.has_output(1))
    move_state(at(st.dst_iter_offset), ctx.output(1).data<float>(), dirs, n, h, spec.layout, false);
  if (spec.cell == Cell::Lstm && ctx.has_output(2))
    move_state(at(st.dst_iter_c_offset), ctx.output(2).data<float>(), dirs, n, h, spec.layout,
               false);
}

std::shared_ptr<void> prepare_dnnl_recurrent_grad(InferContext& ctx, const RecurrentSpec& spec) {
  try {
    return prepare_grad(ctx, spec);
  } catch (const dnnl::error& e) {
    throw KernelUnsupported{std::string("oneDNN: ") + e.what()};
  }
}

void run_dnnl_recurrent_grad(const void* state, RunContext& ctx, const RecurrentSpec& spec) {
  const auto& st = *static_cast<const RecurrentGradState*>(state);
  const RecurrentState& f = st.fwd;
  const Geometry& g = f.g;
  char* scratch = static_cast<char*>(ctx.scratch());
  auto at = [&](size_t offset) { return reinterpret_cast<float*>(scratch + offset); };
  const bool fed = !g.constant_weights;
  // Weights fed at run time are brought into oneDNN's gate order once, then packed for each
  // primitive.
  const RecurrentState::Weights plain = fed ? fed_weights(g, spec, ctx) : RecurrentState::Weights{};
  const RecurrentState::Weights weights =
      fed ? packed_for(plain, g, spec, f.p.weights_layer, f.p.weights_iter) : f.weights;
  const RecurrentState::Weights bwd_weights =
      fed ? packed_for(plain, g, spec, f.p.bwd_weights_layer, f.p.bwd_weights_iter)
          : st.bwd_weights;
  const int64_t t = g.seq, n = g.batch, h = g.hidden, dirs = spec.dirs;
  const bool lstm = spec.cell == Cell::Lstm;

  // X time-major and the initial states [D, N, H] (zero where the node has none).
  const float* x = ctx.input(0).data<float>();
  if (spec.layout) {
    for (int64_t s = 0; s < t; ++s)
      for (int64_t b = 0; b < n; ++b)
        std::copy_n(x + (b * t + s) * g.in, g.in, at(st.src_layer) + (s * n + b) * g.in);
    x = at(st.src_layer);
  }
  // A state-shaped input ([D, N, H] in the node's layout) as oneDNN's ldnc, zero when absent.
  auto initial = [&](size_t input, size_t offset) {
    if (ctx.has_input(input))
      move_state(ctx.input(input).data<float>(), at(offset), dirs, n, h, spec.layout, true);
    else
      std::fill_n(at(offset), dirs * n * h, 0.0f);
    return at(offset);
  };
  const Sources src{x, initial(5, st.src_iter), lstm ? initial(6, st.src_iter_c) : nullptr};
  auto args = forward_args(f, spec, src, weights, scratch_outputs(f, scratch));
  args.add(DNNL_ARG_WORKSPACE, f.p.workspace, scratch + st.workspace);
  dnnl_adapter::guarded(ctx.node(), [&] {
    dnnl_adapter::execute(f.p.forward, args, f.p.scratch, scratch);
    return 0;
  });

  // The output gradients in oneDNN's layouts; zero where none arrives.
  if (ctx.has_input(kDY))
    move_sequence(ctx.input(kDY).data<float>(), at(st.diff_dst_layer), t, n, dirs, h, spec.layout,
                  true);
  else
    std::fill_n(at(st.diff_dst_layer), t * n * dirs * h, 0.0f);
  initial(kDYh, st.diff_dst_iter);
  if (lstm) initial(kDYc, st.diff_dst_iter_c);
  std::fill(scratch + st.diff_weights_layer, scratch + st.diff_end, 0);

  // dX straight into its output where the layouts agree.
  float* dx =
      ctx.has_output(kDX) && !spec.layout ? ctx.output(kDX).data<float>() : at(st.diff_src_layer);
  args.add(DNNL_ARG_WEIGHTS_LAYER, f.p.bwd_weights_layer, bwd_weights.layer.raw());
  args.add(DNNL_ARG_WEIGHTS_ITER, f.p.bwd_weights_iter, bwd_weights.iter.raw());
  args.add(DNNL_ARG_DIFF_DST_LAYER, g.dst_layer, at(st.diff_dst_layer));
  args.add(DNNL_ARG_DIFF_DST_ITER, g.dst_iter, at(st.diff_dst_iter));
  args.add(DNNL_ARG_DIFF_SRC_LAYER, g.src_layer, dx);
  args.add(DNNL_ARG_DIFF_SRC_ITER, g.src_iter, at(st.diff_src_iter));
  args.add(DNNL_ARG_DIFF_WEIGHTS_LAYER, f.p.diff_weights_layer, at(st.diff_weights_layer));
  args.add(DNNL_ARG_DIFF_WEIGHTS_ITER, f.p.diff_weights_iter, at(st.diff_weights_iter));
  args.add(DNNL_ARG_DIFF_BIAS, g.bias, at(st.diff_bias));
  if (lstm) {
    args.add(DNNL_ARG_DIFF_DST_ITER_C, g.dst_iter_c, at(st.diff_dst_iter_c));
    args.add(DNNL_ARG_DIFF_SRC_ITER_C, g.src_iter_c, at(st.diff_src_iter_c));
    if (g.peepholes) {
      args.add(DNNL_ARG_WEIGHTS_PEEPHOLE, g.peephole, bwd_weights.peephole.raw());
      args.add(DNNL_ARG_DIFF_WEIGHTS_PEEPHOLE, g.peephole, at(st.diff_peephole));
    }
  }
  args.add(DNNL_ARG_BIAS, g.bias, bwd_weights.bias.raw());
  dnnl_adapter::guarded(ctx.node(), [&] {
    dnnl_adapter::execute(f.p.backward, args, f.p.scratch, scratch);
    return 0;
  });

  if (ctx.has_output(kDX) && spec.layout) {
    float* out = ctx.output(kDX).data<float>();
    for (int64_t s = 0; s < t; ++s)
      for (int64_t b = 0; b < n; ++b)
        std::copy_n(dx + (s * n + b) * g.in, g.in, out + (b * t + s) * g.in);
  }
  if (ctx.has_output(kDH0))
    move_state(at(st.diff_src_iter), ctx.output(kDH0).data<float>(), dirs, n, h, spec.layout,
               false);
  if (lstm && ctx.has_output(kDC0))
    move_state(at(st.diff_src_iter_c), ctx.output(kDC0).data<float>(), dirs, n, h, spec.layout,
               false);
  else
    zero_output(ctx, kDC0);
  if (ctx.has_output(kDW))
    write_weight_grad(f.p.diff_weights_layer, at(st.diff_weights_layer), ctx.output(kDW), spec.cell,
                      dirs, g.in, h);
  if (ctx.has_output(kDR))
    write_weight_grad(f.p.diff_weights_iter, at(st.diff_weights_iter), ctx.output(kDR), spec.cell,
                      dirs, h, h);
  if (ctx.has_output(kDB))
    write_bias_grad(at(st.diff_bias), ctx.output(kDB), spec.cell, g.lbr, dirs, h);
  if (kDP < ctx.output_count() && ctx.has_output(kDP)) {
    if (g.peepholes)
      write_peephole_grad(at(st.diff_peephole), ctx.output(kDP), dirs, h);
    else
      zero_output(ctx, kDP);
  }
}

}  // namespace volt
