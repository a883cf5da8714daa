#include "operators/cpu/rnn_dnnl.hpp"

#include <algorithm>

#include "operators/common/dnnl_adapter.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

using dims = dnnl::memory::dims;
using tag = dnnl::memory::format_tag;
constexpr auto f32 = dnnl::memory::data_type::f32;

struct RecurrentState {
  dnnl::primitive prim;
  dnnl::memory::desc src_layer, src_iter, src_iter_c, weights_layer, weights_iter, peephole, bias,
      dst_layer, dst_iter, dst_iter_c, scratch;
  // The weights in oneDNN's layouts: packed once when they are constants; otherwise (training
  // feeds them each step) packed at each run.
  struct Weights {
    Tensor layer, iter, peephole, bias;
  } weights;
  bool runtime_weights = false;
  bool lbr = false, peepholes = false;
  size_t dst_layer_offset = 0, dst_iter_offset = 0, dst_iter_c_offset = 0;
  int64_t seq = 0, batch = 0, hidden = 0, in = 0;
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

RecurrentState::Weights pack_weights(const RecurrentState& st, const RecurrentSpec& spec,
                                     const Tensor& w, const Tensor& r, const Tensor* b,
                                     const Tensor* p) {
  const int64_t dirs = spec.dirs, g = gate_count(spec.cell), in = st.in, h = st.hidden;
  RecurrentState::Weights out;
  const Tensor wl = ldigo(w, spec.cell, dirs, in, h), wi = ldigo(r, spec.cell, dirs, h, h);
  out.layer =
      packed(wl, dnnl::memory::desc({1, dirs, in, g, h}, f32, tag::ldigo), st.weights_layer);
  out.iter = packed(wi, dnnl::memory::desc({1, dirs, h, g, h}, f32, tag::ldigo), st.weights_iter);
  out.bias = bias_ldgo(b, spec.cell, st.lbr, dirs, h);
  if (p) out.peephole = peephole_ldgo(*p, dirs, h);
  return out;
}

std::shared_ptr<RecurrentState> prepare(InferContext& ctx, const RecurrentSpec& spec) {
  if (!spec.primitive_cell)
    throw KernelUnsupported{"activations, clip or input_forget oneDNN does not compute"};
  for (size_t i = 0; i < ctx.input_count() && i < 8; ++i)
    if (ctx.has_input(i) && i != 4 && ctx.dtype(i) != DType::Float)
      throw KernelUnsupported{std::string("dtype ") + dtype_name(ctx.dtype(i))};
  const Tensor* w = ctx.input_tensor(1);
  const Tensor* r = ctx.input_tensor(2);
  const Tensor* b = ctx.has_input(3) ? ctx.input_tensor(3) : nullptr;
  const bool lstm_p = spec.cell == Cell::Lstm && ctx.has_input(7);
  const Tensor* p = lstm_p ? ctx.input_tensor(7) : nullptr;
  const bool constant = w && r && (!ctx.has_input(3) || b) && (!lstm_p || p);
  const Shape& x = ctx.shape(0);
  auto st = std::make_shared<RecurrentState>();
  st->seq = spec.layout ? x[1] : x[0];
  st->batch = spec.layout ? x[0] : x[1];
  const int64_t in = x[2], dirs = spec.dirs, g = gate_count(spec.cell);
  st->in = in;
  st->hidden = spec.hidden ? spec.hidden : ctx.shape(2)[2];
  const int64_t h = st->hidden;
  if (st->seq == 0 || st->batch == 0 || in == 0 || h == 0) throw KernelUnsupported{"empty"};
  // The reference loop checks these with messages naming the node; it runs on a mismatch.
  auto numel = [&](size_t i) { return numel_of(ctx.shape(i)); };
  if (numel(1) != dirs * g * h * in || numel(2) != dirs * g * h * h ||
      (ctx.has_input(3) && numel(3) != dirs * 2 * g * h) || (lstm_p && numel(7) != dirs * 3 * h))
    throw KernelUnsupported{"weights of unexpected sizes"};
  if (ctx.has_input(4)) {  // every sequence at full length, or the reference loop
    const Tensor* lens = ctx.input_tensor(4);
    if (!lens || lens->dtype() != DType::Int32 || lens->numel() != st->batch)
      throw KernelUnsupported{"sequence_lens known only at run time"};
    for (int64_t i = 0; i < st->batch; ++i)
      if (lens->data<int32_t>()[i] != st->seq)
        throw KernelUnsupported{"sequences of several lengths"};
  }
  const bool lbr = spec.cell == Cell::Gru && spec.linear_before_reset;
  const int64_t t = st->seq, n = st->batch;
  st->src_layer = dnnl::memory::desc({t, n, in}, f32, spec.layout ? tag::ntc : tag::tnc);
  if (ctx.has_input(5)) st->src_iter = state_md(dirs, n, h, spec.layout);
  if (spec.cell == Cell::Lstm && ctx.has_input(6))
    st->src_iter_c = state_md(dirs, n, h, spec.layout);
  const dnnl::memory::desc wl_any({1, dirs, in, g, h}, f32, tag::any),
      wi_any({1, dirs, h, g, h}, f32, tag::any);
  st->bias = dnnl::memory::desc({1, dirs, lbr ? g + 1 : g, h}, f32, tag::ldgo);
  if (lstm_p) st->peephole = dnnl::memory::desc({1, dirs, 3, h}, f32, tag::ldgo);
  st->dst_layer = dnnl::memory::desc({t, n, dirs * h}, f32, tag::tnc);
  st->dst_iter = dnnl::memory::desc({1, dirs, n, h}, f32, tag::ldnc);
  if (spec.cell == Cell::Lstm) st->dst_iter_c = st->dst_iter;
  const auto dir = dirs == 2      ? dnnl::rnn_direction::bidirectional_concat
                   : spec.reverse ? dnnl::rnn_direction::unidirectional_right2left
                                  : dnnl::rnn_direction::unidirectional_left2right;
  const auto kind = dnnl::prop_kind::forward_inference;
  const dnnl::primitive_attr attr = dnnl_adapter::scratch_attr();
  const auto& eng = dnnl_adapter::engine();
  auto finish = [&](const auto& pd) {
    // oneDNN 2.6 has no brgemm GRU: its "ref" RNN drives packed sgemm calls, not an
    // elementwise loop (speech_lstm_gru's GRU, 50 steps of 96 units: 0.39 ms), so it is taken.
    st->weights_layer = pd.weights_layer_desc();
    st->weights_iter = pd.weights_iter_desc();
    st->scratch = pd.scratchpad_desc();
  };
  if (spec.cell == Cell::Lstm) {
    const auto d =
        lstm_p ? dnnl::lstm_forward::desc(kind, dir, st->src_layer, st->src_iter, st->src_iter_c,
                                          wl_any, wi_any, st->peephole, st->bias, st->dst_layer,
                                          st->dst_iter, st->dst_iter_c)
               : dnnl::lstm_forward::desc(kind, dir, st->src_layer, st->src_iter, st->src_iter_c,
                                          wl_any, wi_any, st->bias, st->dst_layer, st->dst_iter,
                                          st->dst_iter_c);
    const dnnl::lstm_forward::primitive_desc pd(d, attr, eng);
    finish(pd);
    st->prim = dnnl::lstm_forward(pd);
  } else if (lbr) {
    const dnnl::lbr_gru_forward::desc d(kind, dir, st->src_layer, st->src_iter, wl_any, wi_any,
                                        st->bias, st->dst_layer, st->dst_iter);
    const dnnl::lbr_gru_forward::primitive_desc pd(d, attr, eng);
    finish(pd);
    st->prim = dnnl::lbr_gru_forward(pd);
  } else if (spec.cell == Cell::Gru) {
    const dnnl::gru_forward::desc d(kind, dir, st->src_layer, st->src_iter, wl_any, wi_any,
                                    st->bias, st->dst_layer, st->dst_iter);
    const dnnl::gru_forward::primitive_desc pd(d, attr, eng);
    finish(pd);
    st->prim = dnnl::gru_forward(pd);
  } else {
    const auto act = spec.rnn_activation == "Relu"      ? dnnl::algorithm::eltwise_relu
                     : spec.rnn_activation == "Sigmoid" ? dnnl::algorithm::eltwise_logistic
                                                        : dnnl::algorithm::eltwise_tanh;
    const dnnl::vanilla_rnn_forward::desc d(kind, act, dir, st->src_layer, st->src_iter, wl_any,
                                            wi_any, st->bias, st->dst_layer, st->dst_iter);
    const dnnl::vanilla_rnn_forward::primitive_desc pd(d, attr, eng);
    finish(pd);
    st->prim = dnnl::vanilla_rnn_forward(pd);
  }
  st->lbr = lbr;
  st->peepholes = lstm_p;
  st->runtime_weights = !constant;
  if (constant) st->weights = pack_weights(*st, spec, *w, *r, b, p);
  size_t bytes = dnnl_adapter::align64(st->scratch.get_size());
  st->dst_layer_offset = bytes;
  bytes += dnnl_adapter::align64(st->dst_layer.get_size());
  st->dst_iter_offset = bytes;
  bytes += dnnl_adapter::align64(st->dst_iter.get_size());
  st->dst_iter_c_offset = bytes;
  if (spec.cell == Cell::Lstm) bytes += st->dst_iter.get_size();
  ctx.request_scratch(bytes);
  return st;
}

// oneDNN's [1, D, N, H] state into the output's [D, N, H] (layout 0) or [N, D, H] (layout 1).
void write_state(const float* src, Tensor& out, int64_t dirs, int64_t n, int64_t h,
                 int64_t layout) {
  float* dst = out.data<float>();
  for (int64_t d = 0; d < dirs; ++d)
    for (int64_t b = 0; b < n; ++b)
      std::copy_n(src + (d * n + b) * h, h, dst + (layout ? b * dirs + d : d * n + b) * h);
}

}  // namespace

std::shared_ptr<void> prepare_dnnl_recurrent(InferContext& ctx, const RecurrentSpec& spec) {
  try {
    return prepare(ctx, spec);
  } catch (const dnnl::error& e) {
    throw KernelUnsupported{std::string("oneDNN: ") + e.what()};
  }
}

void run_dnnl_recurrent(const void* state, RunContext& ctx, const RecurrentSpec& spec) {
  const auto& st = *static_cast<const RecurrentState*>(state);
  char* scratch = static_cast<char*>(ctx.scratch());
  float* dst_layer = reinterpret_cast<float*>(scratch + st.dst_layer_offset);
  float* dst_iter = reinterpret_cast<float*>(scratch + st.dst_iter_offset);
  float* dst_iter_c = reinterpret_cast<float*>(scratch + st.dst_iter_c_offset);
  using dnnl_adapter::wrap;
  RecurrentState::Weights fed;  // weights fed at run time, packed for this run
  if (st.runtime_weights)
    fed = pack_weights(st, spec, ctx.input(1), ctx.input(2),
                       ctx.has_input(3) ? &ctx.input(3) : nullptr,
                       st.peepholes ? &ctx.input(7) : nullptr);
  const RecurrentState::Weights& weights = st.runtime_weights ? fed : st.weights;
  std::unordered_map<int, dnnl::memory> args = {
      {DNNL_ARG_SRC_LAYER, wrap(st.src_layer, ctx.input(0).raw())},
      {DNNL_ARG_WEIGHTS_LAYER, wrap(st.weights_layer, weights.layer.raw())},
      {DNNL_ARG_WEIGHTS_ITER, wrap(st.weights_iter, weights.iter.raw())},
      {DNNL_ARG_BIAS, wrap(st.bias, weights.bias.raw())},
      {DNNL_ARG_DST_LAYER, wrap(st.dst_layer, dst_layer)},
      {DNNL_ARG_DST_ITER, wrap(st.dst_iter, dst_iter)}};
  if (ctx.has_input(5)) args.emplace(DNNL_ARG_SRC_ITER, wrap(st.src_iter, ctx.input(5).raw()));
  if (spec.cell == Cell::Lstm) {
    if (ctx.has_input(6))
      args.emplace(DNNL_ARG_SRC_ITER_C, wrap(st.src_iter_c, ctx.input(6).raw()));
    if (st.peepholes)
      args.emplace(DNNL_ARG_WEIGHTS_PEEPHOLE, wrap(st.peephole, weights.peephole.raw()));
    args.emplace(DNNL_ARG_DST_ITER_C, wrap(st.dst_iter_c, dst_iter_c));
  }
  dnnl_adapter::guarded(ctx.node(), [&] {
    dnnl_adapter::execute(st.prim, std::move(args), st.scratch, scratch);
    return 0;
  });
  const int64_t t = st.seq, n = st.batch, h = st.hidden, dirs = spec.dirs;
  if (ctx.has_output(0)) {  // [T, N, D*H] -> Y [T, D, N, H] (layout 0) or [N, T, D, H]
    float* y = ctx.output(0).data<float>();
#pragma omp parallel for if (t * n * dirs * h > 65536)
    for (int64_t s = 0; s < t; ++s)
      for (int64_t b = 0; b < n; ++b)
        for (int64_t d = 0; d < dirs; ++d)
          std::copy_n(dst_layer + (s * n + b) * dirs * h + d * h, h,
                      y + (spec.layout ? (b * t + s) * dirs + d : (s * dirs + d) * n + b) * h);
  }
  if (ctx.has_output(1)) write_state(dst_iter, ctx.output(1), dirs, n, h, spec.layout);
  if (spec.cell == Cell::Lstm && ctx.has_output(2))
    write_state(dst_iter_c, ctx.output(2), dirs, n, h, spec.layout);
}

}  // namespace volt
