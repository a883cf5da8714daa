#include "operators/cpu/recurrent_rows.hpp"

#include <dnnl.hpp>

#include <algorithm>
#include <cstring>
#include <string>

#include "operators/common/parallel.hpp"
#include "operators/common/simd_clones.hpp"
#include "operators/common/strided_gather.hpp"
#include "operators/common/vector_exp.hpp"
#include "runtime/error.hpp"

namespace volt {

// Past this batch oneDNN's steps (a gemm of the batch against R) win: at batch 8 this loop made
// the corpus's speech model 5.3 ms against 4.0-4.4 on oneDNN's and a 512-unit language model
// 30.1 against 22-24 ms; at batch 1 it wins (see the header). Batches 2-4 were not measured apart.
constexpr int64_t kRecurrentRowsBatch = 4;

struct RecurrentRows {
  bool gru = false;   // else LSTM
  int64_t gates = 4;  // G: 4 for LSTM (i, o, f, c), 3 for GRU (z, r, h)
  int64_t seq = 0, batch = 0, in = 0, hidden = 0, dirs = 1, layout = 0;
  bool reverse = false, bias = false, peepholes = false, lens = false, initial_h = false,
       initial_c = false;
  // In the node's scratch (floats): the input products [D][T*N][GH] (by X's row order), the
  // biases [D][4H] (LSTM: Wb + Rb per gate; GRU: Wb + Rb for z and r, then Wb_h and Rb_h apart,
  // since r scales the recurrent part of the candidate with its bias), per direction h twice
  // (this step's, the next) and c [N][H] each, and per thread its recurrent products [N][G][units].
  size_t xw = 0, bias_sum = 0, states = 0, products = 0, products_per_thread = 0;
  // W transposed, [D][I][GH]: sgemm reads it as it is (with W as stored, 'T', it took 2.7x as
  // long: 1.2 ms against 0.45 for 35 steps of 512 inputs). Made once for constant weights (kept
  // in the node's memo, shared by the plans for other lengths); weights fed at run time are
  // transposed into the scratch at w_t_at.
  std::shared_ptr<const Tensor> w_t;
  size_t w_t_at = 0;
};

namespace {

float* floats(void* scratch, size_t at) {
  return static_cast<float*>(scratch) + at;
}

// out[n * stride + r] = rows[r] . h[n] for r < count, n < batch, four rows at a time: each row
// of R read once for the whole batch, four independent sums in flight. (`omp simd` lets the sums
// be reassociated into vector lanes; always inlined, so that each clone of recurrent_products
// compiles it at its vector width.)
template <int kBatch>
[[gnu::always_inline]] inline void rows_times_states(const float* rows, int64_t count,
                                                     int64_t width, const float* h, float* out,
                                                     int64_t stride) {
  int64_t r = 0;
  for (; r + 4 <= count; r += 4) {
    const float *r0 = rows + r * width, *r1 = r0 + width, *r2 = r1 + width, *r3 = r2 + width;
    for (int n = 0; n < kBatch; ++n) {
      const float* hn = h + n * width;
      float a0 = 0, a1 = 0, a2 = 0, a3 = 0;
#pragma omp simd reduction(+ : a0, a1, a2, a3)
      for (int64_t k = 0; k < width; ++k) {
        a0 += r0[k] * hn[k];
        a1 += r1[k] * hn[k];
        a2 += r2[k] * hn[k];
        a3 += r3[k] * hn[k];
      }
      float* o = out + n * stride + r;
      o[0] = a0;
      o[1] = a1;
      o[2] = a2;
      o[3] = a3;
    }
  }
  for (; r < count; ++r) {
    const float* row = rows + r * width;
    for (int n = 0; n < kBatch; ++n) {
      const float* hn = h + n * width;
      float acc = 0;
#pragma omp simd reduction(+ : acc)
      for (int64_t k = 0; k < width; ++k) acc += row[k] * hn[k];
      out[n * stride + r] = acc;
    }
  }
}

VOLT_SIMD_CLONES void recurrent_products(const float* rows, int64_t count, int64_t width,
                                         const float* h, int64_t batch, float* out,
                                         int64_t stride) {
  switch (batch) {
    case 1:
      return rows_times_states<1>(rows, count, width, h, out, stride);
    case 2:
      return rows_times_states<2>(rows, count, width, h, out, stride);
    case 3:
      return rows_times_states<3>(rows, count, width, h, out, stride);
    default:
      return rows_times_states<4>(rows, count, width, h, out, stride);
  }
}

// One batch row's cell over `units` hidden units: gate pre-activations i, o, f, c (each
// `units` long, input and recurrent products and biases summed), the cell state c updated in
// place, h written. Peepholes p_i, p_o, p_f (null without).
VOLT_SIMD_CLONES void lstm_cell(const float* gi, const float* go, const float* gf, const float* gc,
                                const float* p_i, const float* p_o, const float* p_f, float* c,
                                float* h, int64_t units) {
  if (p_i) {
#pragma omp simd
    for (int64_t j = 0; j < units; ++j) {
      const float i = vector_sigmoid(gi[j] + p_i[j] * c[j]),
                  f = vector_sigmoid(gf[j] + p_f[j] * c[j]);
      const float cell = f * c[j] + i * vector_tanh(gc[j]);
      c[j] = cell;
      h[j] = vector_sigmoid(go[j] + p_o[j] * cell) * vector_tanh(cell);
    }
    return;
  }
#pragma omp simd
  for (int64_t j = 0; j < units; ++j) {
    const float i = vector_sigmoid(gi[j]), f = vector_sigmoid(gf[j]), o = vector_sigmoid(go[j]);
    const float cell = f * c[j] + i * vector_tanh(gc[j]);
    c[j] = cell;
    h[j] = o * vector_tanh(cell);
  }
}

// [D][rows][cols] -> [D][cols][rows], by the one strided copy loop.
void transpose_blocks(const float* src, float* dst, int64_t d, int64_t rows, int64_t cols) {
  strided_gather(src, dst, {d, cols, rows}, {rows * cols, 1, cols});
}

// W^T for constant W, from the node's memo or made and kept there; the planner may then drop W
// (this copy restores it exactly).
std::shared_ptr<const Tensor> transposed_weights(InferContext& ctx, const Tensor& w) {
  const int64_t d = w.dim(0), rows = w.dim(1), cols = w.dim(2);
  std::string key = "recurrent_rows W^T";
  const uintptr_t at = reinterpret_cast<uintptr_t>(w.raw());
  key.append(reinterpret_cast<const char*>(&at), sizeof at);
  auto w_t = ctx.memo() ? std::static_pointer_cast<const Tensor>(ctx.memo()->find(key)) : nullptr;
  if (!w_t) {
    auto made = std::make_shared<Tensor>(Tensor::empty(DType::Float, {d, cols, rows}));
    transpose_blocks(w.data<float>(), made->data<float>(), d, rows, cols);
    w_t = made;
    if (ctx.memo()) ctx.memo()->keep(key, std::const_pointer_cast<Tensor>(w_t));
  }
  ctx.keeps_copy_of_input(1, CopyOfInput{[w_t, d, rows, cols] {
                            Tensor w = Tensor::empty(DType::Float, {d, rows, cols});
                            transpose_blocks(w_t->data<float>(), w.data<float>(), d, cols, rows);
                            return w;
                          }});
  return w_t;
}

// One batch row's GRU cell (linear_before_reset) over `units` hidden units: recurrent products
// p_z, p_r, p_h, input products x_z, x_r, x_h, biases b_z and b_r (Wb + Rb), wb_h and rb_h; h
// written from the previous h.
VOLT_SIMD_CLONES void gru_cell(const float* p_z, const float* p_r, const float* p_h,
                               const float* x_z, const float* x_r, const float* x_h,
                               const float* b_z, const float* b_r, const float* wb_h,
                               const float* rb_h, const float* h_prev, float* h, int64_t units) {
#pragma omp simd
  for (int64_t j = 0; j < units; ++j) {
    const float z = vector_sigmoid(x_z[j] + b_z[j] + p_z[j]);
    const float r = vector_sigmoid(x_r[j] + b_r[j] + p_r[j]);
    const float n = vector_tanh(x_h[j] + wb_h[j] + r * (p_h[j] + rb_h[j]));
    h[j] = (1.0f - z) * n + z * h_prev[j];
  }
}

struct Io {
  const float *x, *w, *r, *b, *p, *h0, *c0;
  const int32_t* lens32;
  const int64_t* lens64;
  float *y, *yh, *yc;
};

// Direction d's recurrence over hidden units [lo, hi) of every batch row, on one thread of a
// team; `sync` runs between steps (a barrier when the units are split across threads).
template <class Sync>
void run_direction(const RecurrentRows& p, const Io& io, void* scratch, int64_t d, int64_t lo,
                   int64_t hi, float* products, Sync&& sync) {
  const int64_t t_len = p.seq, n_len = p.batch, h = p.hidden, gh = p.gates * h, units = hi - lo;
  const bool backwards = p.reverse || d == 1;
  const float* xw = floats(scratch, p.xw) + d * t_len * n_len * gh;
  const float* bias = floats(scratch, p.bias_sum) + d * 4 * h;
  const float* r = io.r + d * gh * h;
  float* h_buf[2] = {floats(scratch, p.states) + d * 3 * n_len * h, nullptr};
  h_buf[1] = h_buf[0] + n_len * h;
  float* c = h_buf[1] + n_len * h;
  const float* peep = io.p ? io.p + d * 3 * h : nullptr;
  auto length = [&](int64_t n) {
    if (!p.lens) return t_len;
    const int64_t l = io.lens32 ? io.lens32[n] : io.lens64[n];
    return std::clamp<int64_t>(l, 0, t_len);
  };
  // This thread's units of the initial states.
  for (int64_t n = 0; n < n_len; ++n) {
    const int64_t at = p.layout ? (n * p.dirs + d) * h : (d * n_len + n) * h;
    for (int64_t j = lo; j < hi; ++j) {
      h_buf[0][n * h + j] = io.h0 ? io.h0[at + j] : 0.0f;
      if (!p.gru) c[n * h + j] = io.c0 ? io.c0[at + j] : 0.0f;
    }
  }
  sync();
  int cur = 0;
  for (int64_t s = 0; s < t_len; ++s) {
    const float* hc = h_buf[cur];
    float* hn = h_buf[1 - cur];
    for (int64_t g = 0; g < p.gates; ++g)
      recurrent_products(r + (g * h + lo) * h, units, h, hc, n_len, products + g * units,
                         p.gates * units);
    for (int64_t n = 0; n < n_len; ++n) {
      const int64_t len = length(n);
      float* hn_row = hn + n * h + lo;
      if (s >= len) {  // finished: the state stays as it was
        std::memcpy(hn_row, hc + n * h + lo, static_cast<size_t>(units) * sizeof(float));
        continue;
      }
      const int64_t t = backwards ? len - 1 - s : s;
      const int64_t row = p.layout ? n * t_len + t : t * n_len + n;
      float* gn = products + n * p.gates * units;
      const float* xr = xw + row * gh;
      if (p.gru) {
        gru_cell(gn, gn + units, gn + 2 * units, xr + lo, xr + h + lo, xr + 2 * h + lo, bias + lo,
                 bias + h + lo, bias + 2 * h + lo, bias + 3 * h + lo, hc + n * h + lo, hn_row,
                 units);
      } else {
        for (int64_t g = 0; g < 4; ++g)
          for (int64_t j = 0; j < units; ++j)
            gn[g * units + j] += xr[g * h + lo + j] + bias[g * h + lo + j];
        lstm_cell(gn, gn + units, gn + 2 * units, gn + 3 * units, peep ? peep + lo : nullptr,
                  peep ? peep + h + lo : nullptr, peep ? peep + 2 * h + lo : nullptr,
                  c + n * h + lo, hn_row, units);
      }
      if (io.y) {
        const int64_t at =
            p.layout ? ((n * t_len + t) * p.dirs + d) * h : ((t * p.dirs + d) * n_len + n) * h;
        std::memcpy(io.y + at + lo, hn_row, static_cast<size_t>(units) * sizeof(float));
      }
    }
    cur = 1 - cur;
    sync();
  }
  for (int64_t n = 0; n < n_len; ++n) {
    const int64_t at = p.layout ? (n * p.dirs + d) * h : (d * n_len + n) * h;
    if (io.yh) std::memcpy(io.yh + at + lo, h_buf[cur] + n * h + lo, units * sizeof(float));
    if (io.yc && !p.gru) std::memcpy(io.yc + at + lo, c + n * h + lo, units * sizeof(float));
  }
}

}  // namespace

std::shared_ptr<const RecurrentRows> plan_recurrent_rows(InferContext& ctx,
                                                         const RecurrentSpec& spec) {
  // GRU with the reset gate applied after R, as PyTorch exports it (every gate's recurrent product
  // then comes from h alone, one barrier a step), in one direction: 50 steps at batch 1, 2
  // threads, this loop against oneDNN's primitive, p50 of 200 runs (`volt bench`): 128 -> 256
  // units 0.315 / 0.366 ms, 256 -> 512 1.37 / 1.44, the speech model's 0.105 / 0.14-0.148; but
  // bidirectional 128 -> 128 0.215 / 0.166 and 128 -> 256 0.637 / 0.519 (LSTMs of the same
  // sizes: 0.289 / 0.367 and 0.90-0.94 / 1.26, this loop ahead).
  if (!spec.primitive_cell || spec.cell == Cell::Rnn ||
      (spec.cell == Cell::Gru && (!spec.linear_before_reset || spec.dirs != 1)))
    return nullptr;
  for (size_t i : {0, 1, 2, 3, 5, 6, 7})
    if (i < ctx.input_count() && ctx.has_input(i) && ctx.dtype(i) != DType::Float) return nullptr;
  const Shape &x = ctx.shape(0), &w = ctx.shape(1), &r = ctx.shape(2);
  auto p = std::make_shared<RecurrentRows>();
  p->gru = spec.cell == Cell::Gru;
  p->gates = p->gru ? 3 : 4;
  p->layout = spec.layout;
  p->seq = spec.layout ? x[1] : x[0];
  p->batch = spec.layout ? x[0] : x[1];
  p->in = x[2];
  p->dirs = spec.dirs;
  p->reverse = spec.reverse;
  p->hidden = r.size() == 3 ? r[2] : 0;
  if (p->batch < 1 || p->batch > kRecurrentRowsBatch || p->seq < 1 || p->hidden < 1 || p->in < 1)
    return nullptr;
  const int64_t h = p->hidden, gh = p->gates * h, d = p->dirs;
  // Inputs that do not match the node's sizes go to the primitive's path, which says what is wrong.
  if (w != Shape{d, gh, p->in} || r != Shape{d, gh, h} || (spec.hidden && spec.hidden != h))
    return nullptr;
  auto present = [&](size_t i) { return i < ctx.input_count() && ctx.has_input(i); };
  const Shape state = spec.layout ? Shape{p->batch, d, h} : Shape{d, p->batch, h};
  p->bias = present(3);
  p->lens = present(4);
  p->initial_h = present(5);
  p->initial_c = !p->gru && present(6);
  p->peepholes = !p->gru && present(7);
  if ((p->bias && ctx.shape(3) != Shape{d, 2 * gh}) ||
      (p->lens && (ctx.shape(4) != Shape{p->batch} ||
                   (ctx.dtype(4) != DType::Int32 && ctx.dtype(4) != DType::Int64))) ||
      (p->initial_h && ctx.shape(5) != state) || (p->initial_c && ctx.shape(6) != state) ||
      (p->peepholes && ctx.shape(7) != Shape{d, 3 * h}))
    return nullptr;
  const size_t threads = static_cast<size_t>(std::max(1, ctx.threads()));
  size_t at = 0;
  auto take = [&](size_t count) {
    const size_t start = at;
    at += (count + 15) / 16 * 16;  // 64-byte aligned
    return start;
  };
  p->xw = take(static_cast<size_t>(d * p->seq * p->batch * gh));
  p->bias_sum = take(static_cast<size_t>(d * 4 * h));
  p->states = take(static_cast<size_t>(d * 3 * p->batch * h));
  p->products_per_thread = (static_cast<size_t>(p->batch * gh) + 15) / 16 * 16;
  p->products = take(threads * p->products_per_thread);
  if (const Tensor* weights = ctx.input_tensor(1))
    p->w_t = transposed_weights(ctx, *weights);
  else
    p->w_t_at = take(static_cast<size_t>(d * gh * p->in));
  ctx.request_scratch(at * sizeof(float));
  return p;
}

void run_recurrent_rows(const RecurrentRows& p, RunContext& ctx) {
  const int64_t h = p.hidden, gh = p.gates * h, rows = p.seq * p.batch;
  void* scratch = ctx.scratch();
  auto optional = [&](size_t i) -> const float* {
    return i < ctx.input_count() && ctx.has_input(i) ? ctx.input(i).data<float>() : nullptr;
  };
  Io io{};
  io.x = ctx.input(0).data<float>();
  io.w = p.w_t ? nullptr : ctx.input(1).data<float>();  // (the planner may have dropped it)
  io.r = ctx.input(2).data<float>();
  io.b = p.bias ? optional(3) : nullptr;
  io.h0 = p.initial_h ? optional(5) : nullptr;
  io.c0 = p.initial_c ? optional(6) : nullptr;
  io.p = p.peepholes ? optional(7) : nullptr;
  if (p.lens) {
    const Tensor& l = ctx.input(4);
    if (l.dtype() == DType::Int32)
      io.lens32 = l.data<int32_t>();
    else
      io.lens64 = l.data<int64_t>();
  }
  io.y = ctx.has_output(0) ? ctx.output(0).data<float>() : nullptr;
  io.yh = ctx.output_count() > 1 && ctx.has_output(1) ? ctx.output(1).data<float>() : nullptr;
  io.yc = ctx.output_count() > 2 && ctx.has_output(2) ? ctx.output(2).data<float>() : nullptr;
  // Steps past a row's length leave zeros in Y.
  if (io.y && p.lens) std::fill_n(io.y, ctx.output(0).numel(), 0.0f);
  // Input products of every step at once, biases summed.
  const float* w_t = p.w_t ? p.w_t->data<float>() : floats(scratch, p.w_t_at);
  if (!p.w_t) transpose_blocks(io.w, floats(scratch, p.w_t_at), p.dirs, gh, p.in);
  for (int64_t d = 0; d < p.dirs; ++d) {
    float* xw = floats(scratch, p.xw) + d * rows * gh;
    const dnnl_status_t status = dnnl_sgemm('N', 'N', rows, gh, p.in, 1.0f, io.x, p.in,
                                            w_t + d * p.in * gh, gh, 0.0f, xw, gh);
    VOLT_CHECK(status == dnnl_success, Runtime,
               ctx.node().describe() + ": sgemm of the input product failed");
    float* bias = floats(scratch, p.bias_sum) + d * 4 * h;
    const float* wb = io.b ? io.b + d * 2 * gh : nullptr;
    const float* rb = wb ? wb + gh : nullptr;
    for (int64_t k = 0; k < 4 * h; ++k)
      if (!p.gru)
        bias[k] = wb ? wb[k] + rb[k] : 0.0f;
      else if (k < 2 * h)  // z and r
        bias[k] = wb ? wb[k] + rb[k] : 0.0f;
      else  // Wb_h, then Rb_h
        bias[k] = wb ? (k < 3 * h ? wb[k] : rb[k - h]) : 0.0f;
  }
  const int threads = std::max(1, ctx.threads());
  float* products_base = floats(scratch, p.products);
  if (p.dirs == 2 && threads >= 2) {
    // Each direction on its own thread, whole: no barrier between steps.
    parallel_for(2, true, [&](int64_t d) {
      run_direction(p, io, scratch, d, 0, h, products_base + d * p.products_per_thread, [] {});
    });
    return;
  }
  // Hidden units split across the team in runs of 16 (whole vectors), a barrier a step.
  const int64_t team = std::min<int64_t>(threads, std::max<int64_t>(1, (h + 15) / 16));
  for (int64_t d = 0; d < p.dirs; ++d)
    parallel_team(team, [&](int64_t rank, int64_t size, auto&& barrier) {
      const int64_t per = (h + size * 16 - 1) / (size * 16) * 16;
      const int64_t lo = std::min(h, rank * per), hi = std::min(h, lo + per);
      run_direction(p, io, scratch, d, lo, hi, products_base + rank * p.products_per_thread,
                    barrier);
    });
}

}  // namespace volt
