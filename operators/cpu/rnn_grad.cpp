// The gradient of RNN, GRU and LSTM (ai.volt RecurrentGrad): backpropagation through time. The
// forward recurrence is recomputed here, keeping each step's gates (the forward node keeps
// none), then walked back from the last step. In fp32, for the cells oneDNN computes (rnn_dnnl:
// default activations, no clip or input_forget, full-length sequences), on oneDNN's
// forward-training and backward primitives. Otherwise, and in double, on the loops below:
// every direction, both layouts, sequence_lens, initial states, clip, LSTM peepholes and
// input_forget, GRU's linear_before_reset, with the activations whose derivative follows from
// their output (Sigmoid, Tanh, Relu), which are the defaults and what exporters write.
//
// Inputs: X, W, R, B, sequence_lens, initial_h, initial_c, P (the forward node's), then dY,
// dY_h, dY_c ("" where no gradient arrives). Outputs: dX, dW, dR, dB, d_initial_h, d_initial_c,
// dP.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include <dnnl.h>

#include "operators/common/tensor_values.hpp"
#include "operators/cpu/rnn_attrs.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

enum Input : size_t { kX, kW, kR, kB, kLens, kH0, kC0, kP, kDY, kDYh, kDYc };
enum Output : size_t { kDX, kDW, kDR, kDB, kDH0, kDC0, kDP };

// C = alpha op(A) op(B) + beta C, row-major (op: transposed when t*). fp32 on oneDNN's sgemm;
// double (the finite-difference tests) in plain loops.
template <class T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    const dnnl_status_t st =
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    VOLT_CHECK(st == dnnl_success, Runtime, "RecurrentGrad: oneDNN sgemm failed");
  } else {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        T s = 0;
        for (int64_t l = 0; l < k; ++l)
          s += (ta ? a[l * lda + i] : a[i * lda + l]) * (tb ? b[j * ldb + l] : b[l * ldb + j]);
        c[i * ldc + j] = alpha * s + (beta == T(0) ? T(0) : beta * c[i * ldc + j]);
      }
  }
}

Cell cell_named(const std::string& s, const Node& n) {
  if (s == "RNN") return Cell::Rnn;
  if (s == "GRU") return Cell::Gru;
  VOLT_CHECK(s == "LSTM", InvalidModel, n.describe() + ": unknown cell '" + s + "'");
  return Cell::Lstm;
}

class RecurrentGrad final : public Kernel {
 public:
  explicit RecurrentGrad(const Node& n)
      : a_(recurrent_attrs(n, cell_named(n.attr_string("cell", ""), n))),
        spec_(recurrent_spec(a_)) {
    for (const auto& name : a_.activations)
      VOLT_CHECK(name == "Sigmoid" || name == "Tanh" || name == "Relu", NotImplemented,
                 n.describe() + ": the gradient of a recurrent cell with activation '" + name +
                     "' is not supported yet (Sigmoid, Tanh and Relu are)");
  }

  void infer(InferContext& ctx) const override {
    const Shape& x = ctx.shape(kX);
    VOLT_CHECK(x.size() == 3, InvalidArgument, ctx.node().describe() + ": X must be 3-D");
    const int64_t h = a_.hidden ? a_.hidden : ctx.shape(kR)[2];
    const int64_t batch = a_.layout ? x[0] : x[1];
    const Shape state = a_.layout ? Shape{batch, a_.dirs, h} : Shape{a_.dirs, batch, h};
    const Shape shapes[] = {
        x,     ctx.shape(kW), ctx.shape(kR),        Shape{a_.dirs, 2 * a_.gates() * h},
        state, state,         Shape{a_.dirs, 3 * h}};
    for (size_t o = 0; o < ctx.output_count(); ++o) ctx.set_output(o, ctx.dtype(kX), shapes[o]);
    if (ctx.dtype(kX) != DType::Float) return;  // double: the loops, for the gradient checks
    try {
      ctx.set_state(prepare_dnnl_recurrent_grad(ctx, spec_));
    } catch (const KernelUnsupported& u) {
      ctx.runs_reference_loop(u.reason);
    }
  }

  void run(RunContext& ctx) const override {
    if (ctx.state_ptr()) return run_dnnl_recurrent_grad(ctx.state_ptr(), ctx, spec_);
    if (ctx.input(kX).dtype() == DType::Double)
      run_as<double>(ctx);
    else
      run_as<float>(ctx);  // fp32 (fp16 and bf16 widened): the products go to sgemm
  }

 private:
  // The recurrence batched over the batch: per step one product of the states with R (and one
  // of the gates' gradients with R going back); the input products of every step at once, before
  // (X W) and after (dX, dW). Batch elements past their sequence_lens keep their state.
  template <class T>
  void run_as(RunContext& ctx) const {
    const Tensor& xt = ctx.input(kX);
    const int64_t S = a_.layout ? xt.dim(1) : xt.dim(0), B = a_.layout ? xt.dim(0) : xt.dim(1),
                  I = xt.dim(2), G = a_.gates(), D = a_.dirs;
    const int64_t H = a_.hidden ? a_.hidden : ctx.input(kR).dim(2), GH = G * H;
    auto read = [&](size_t i, int64_t size, bool required) {
      if (!ctx.has_input(i)) {
        VOLT_CHECK(!required, InvalidArgument,
                   ctx.node().describe() + ": input " + std::to_string(i) + " is missing");
        return std::vector<T>(static_cast<size_t>(size), T(0));
      }
      const auto v = to_doubles(ctx.input(i));
      VOLT_CHECK(static_cast<int64_t>(v.size()) == size, InvalidArgument,
                 ctx.node().describe() + ": input " + std::to_string(i) + " has " +
                     std::to_string(v.size()) + " elements, expected " + std::to_string(size));
      return std::vector<T>(v.begin(), v.end());
    };
    const bool lstm = a_.cell == Cell::Lstm, gru = a_.cell == Cell::Gru,
               lbr = a_.linear_before_reset;
    const auto w = read(kW, D * GH * I, true), r = read(kR, D * GH * H, true),
               b = read(kB, D * 2 * GH, false),
               p = lstm ? read(kP, D * 3 * H, false) : std::vector<T>();
    std::vector<int64_t> lens(static_cast<size_t>(B), S);
    if (ctx.has_input(kLens)) {
      const auto l = to_doubles(ctx.input(kLens));
      VOLT_CHECK(static_cast<int64_t>(l.size()) == B, InvalidArgument,
                 ctx.node().describe() + ": sequence_lens does not match the batch");
      for (int64_t i = 0; i < B; ++i)
        lens[i] = std::clamp<int64_t>(static_cast<int64_t>(l[i]), 0, S);
    }
    const int64_t steps = B ? *std::max_element(lens.begin(), lens.end()) : 0;
    // Time-major copies: x [S][B][I], dY [S][D][B][H], states [D][B][H].
    const auto xin = read(kX, S * B * I, true);
    std::vector<T> x(xin.size());
    for (int64_t t = 0; t < S; ++t)
      for (int64_t bi = 0; bi < B; ++bi)
        std::copy_n(xin.begin() + (a_.layout ? bi * S + t : t * B + bi) * I, I,
                    x.begin() + (t * B + bi) * I);
    std::vector<T> dy;
    if (ctx.has_input(kDY)) {
      const auto raw = read(kDY, S * D * B * H, true);
      dy.resize(raw.size());
      for (int64_t t = 0; t < S; ++t)
        for (int64_t d = 0; d < D; ++d)
          for (int64_t bi = 0; bi < B; ++bi)
            std::copy_n(raw.begin() + (a_.layout ? (bi * S + t) * D + d : (t * D + d) * B + bi) * H,
                        H, dy.begin() + ((t * D + d) * B + bi) * H);
    }
    auto state = [&](size_t i) { return reorder_state(read(i, D * B * H, false), B, H, true); };
    const auto h0 = state(kH0), c0 = lstm ? state(kC0) : std::vector<T>();
    const auto dyh = state(kDYh), dyc = lstm ? state(kDYc) : std::vector<T>();

    std::vector<T> dx(x.size(), T(0)), dw(w.size(), T(0)), dr(r.size(), T(0)), db(b.size(), T(0)),
        dh0(h0.size(), T(0)), dc0(c0.size(), T(0)), dp(p.size(), T(0));
    auto mask = [&](T v) { return a_.clip <= 0 || std::abs(v) <= a_.clip ? T(1) : T(0); };
    auto clip = [&](T v) {
      return a_.clip > 0 ? std::clamp(v, static_cast<T>(-a_.clip), static_cast<T>(a_.clip)) : v;
    };
    const size_t per_dir = a_.per_dir();

    for (int64_t d = 0; d < D; ++d) {
      const bool backwards = a_.reverse || d == 1;
      const T* W = w.data() + d * GH * I;
      const T* R = r.data() + d * GH * H;
      const T* Wb = b.data() + d * 2 * GH;
      const T* Rb = Wb + GH;
      const T* P = lstm ? p.data() + d * 3 * H : nullptr;
      const Activation F{a_.activations[d * per_dir]},
          Gf{a_.activations[d * per_dir + (per_dir > 1 ? 1 : 0)]},
          Hf{a_.activations[d * per_dir + (per_dir > 2 ? 2 : 0)]};
      // x W^T + Wb for every (t, b) at once.
      std::vector<T> xw(static_cast<size_t>(S * B * GH));
      for (int64_t k = 0; k < S * B; ++k) std::copy_n(Wb, GH, xw.begin() + k * GH);
      gemm<T>(false, true, S * B, GH, I, T(1), x.data(), I, W, I, T(1), xw.data(), GH);
      // The time step each batch element is at in processing step s (-1: past its length).
      auto time_of = [&](int64_t s, int64_t bi) {
        return s >= lens[bi] ? int64_t{-1} : (backwards ? lens[bi] - 1 - s : s);
      };
      // Per step: the state before it, the pre-activations, the activated gates, (GRU) the
      // recurrent term the reset gate meets, (LSTM) the cell states.
      std::vector<T> hs(static_cast<size_t>((steps + 1) * B * H)),
          pre(static_cast<size_t>(steps * B * GH)), act(pre.size()),
          hr(gru ? static_cast<size_t>(steps * B * H) : 0),
          cs(lstm ? static_cast<size_t>((steps + 1) * B * H) : 0), rh(static_cast<size_t>(B * GH)),
          sr(gru && !lbr ? static_cast<size_t>(steps * B * H) : 0),
          q(gru && !lbr ? static_cast<size_t>(B * H) : 0);  // the step's (r * h_prev) R_h^T
      std::copy_n(h0.begin() + d * B * H, B * H, hs.begin());
      if (lstm) std::copy_n(c0.begin() + d * B * H, B * H, cs.begin());
      for (int64_t s = 0; s < steps; ++s) {
        const T* hp = hs.data() + s * B * H;
        T* hn = hs.data() + (s + 1) * B * H;
        // h_prev R^T + Rb (for GRU without linear_before_reset, only its z and r gates).
        const int64_t rcols = gru && !lbr ? 2 * H : GH;
        for (int64_t bi = 0; bi < B; ++bi) std::copy_n(Rb, GH, rh.begin() + bi * GH);
        gemm<T>(false, true, B, rcols, H, T(1), hp, H, R, H, T(1), rh.data(), GH);
        for (int64_t bi = 0; bi < B; ++bi) {
          const int64_t t = time_of(s, bi);
          const T* hpb = hp + bi * H;
          T* hnb = hn + bi * H;
          T* a = pre.data() + (s * B + bi) * GH;
          T* y = act.data() + (s * B + bi) * GH;
          if (t < 0) {  // past its length: the state stays
            std::copy_n(hpb, H, hnb);
            if (lstm)
              std::copy_n(cs.data() + (s * B + bi) * H, H, cs.data() + ((s + 1) * B + bi) * H);
            std::fill_n(a, GH, T(0));
            std::fill_n(y, GH, T(0));
            continue;
          }
          const T* xa = xw.data() + (t * B + bi) * GH;
          const T* ra = rh.data() + bi * GH;
          if (a_.cell == Cell::Rnn) {
            for (int64_t j = 0; j < H; ++j) {
              a[j] = xa[j] + ra[j];
              hnb[j] = y[j] = F(clip(a[j]));
            }
          } else if (gru) {
            for (int64_t j = 0; j < 2 * H; ++j) {
              a[j] = xa[j] + ra[j];
              y[j] = F(clip(a[j]));
            }
            if (lbr) {
              for (int64_t j = 0; j < H; ++j) {
                hr[(s * B + bi) * H + j] = ra[2 * H + j];
                a[2 * H + j] = xa[2 * H + j] + y[H + j] * ra[2 * H + j];
              }
            } else {
              T* sv = sr.data() + (s * B + bi) * H;  // r * h_prev, which meets R_h
              for (int64_t j = 0; j < H; ++j) sv[j] = y[H + j] * hpb[j];
            }
          } else {  // LSTM, gate order i, o, f, c
            const T* cp = cs.data() + (s * B + bi) * H;
            T* cn = cs.data() + ((s + 1) * B + bi) * H;
            for (int64_t j = 0; j < H; ++j) {
              a[j] = xa[j] + ra[j] + P[j] * cp[j];
              a[2 * H + j] = xa[2 * H + j] + ra[2 * H + j] + P[2 * H + j] * cp[j];
              a[3 * H + j] = xa[3 * H + j] + ra[3 * H + j];
              y[j] = F(clip(a[j]));
              y[2 * H + j] = a_.input_forget ? 1 - y[j] : F(clip(a[2 * H + j]));
              y[3 * H + j] = Gf(clip(a[3 * H + j]));
              cn[j] = y[2 * H + j] * cp[j] + y[j] * y[3 * H + j];
              a[H + j] = xa[H + j] + ra[H + j] + P[H + j] * cn[j];
              y[H + j] = F(clip(a[H + j]));
              hnb[j] = y[H + j] * Hf(cn[j]);
            }
          }
        }
        if (gru && !lbr) {  // the candidate: (r * h_prev) R_h^T + Rb_h, then the blend
          for (int64_t bi = 0; bi < B; ++bi) std::copy_n(Rb + 2 * H, H, q.begin() + bi * H);
          gemm<T>(false, true, B, H, H, T(1), sr.data() + s * B * H, H, R + 2 * H * H, H, T(1),
                  q.data(), H);
          for (int64_t bi = 0; bi < B; ++bi) {
            const int64_t t = time_of(s, bi);
            if (t < 0) continue;
            T* a = pre.data() + (s * B + bi) * GH;
            for (int64_t j = 0; j < H; ++j)
              a[2 * H + j] = xw[(t * B + bi) * GH + 2 * H + j] + q[bi * H + j];
          }
        }
        if (gru)
          for (int64_t bi = 0; bi < B; ++bi) {
            if (time_of(s, bi) < 0) continue;
            T* a = pre.data() + (s * B + bi) * GH;
            T* y = act.data() + (s * B + bi) * GH;
            const T* hpb = hp + bi * H;
            for (int64_t j = 0; j < H; ++j) {
              y[2 * H + j] = Gf(clip(a[2 * H + j]));
              hn[bi * H + j] = (1 - y[j]) * y[2 * H + j] + y[j] * hpb[j];
            }
          }
      }

      // Back through the steps. dh, dc: the gradients reaching the state after step s; dx_pre
      // the gradient of each (t, b)'s x W^T + Wb.
      std::vector<T> dh(dyh.begin() + d * B * H, dyh.begin() + (d + 1) * B * H),
          dc = lstm ? std::vector<T>(dyc.begin() + d * B * H, dyc.begin() + (d + 1) * B * H)
                    : std::vector<T>(),
          dx_pre(static_cast<size_t>(S * B * GH), T(0)), da(static_cast<size_t>(B * GH)),
          dhp(static_cast<size_t>(B * H)), ds(gru && !lbr ? static_cast<size_t>(B * H) : 0), dq;
      T* dR = dr.data() + d * GH * H;
      T* dWb = db.data() + d * 2 * GH;
      T* dRb = dWb + GH;
      T* dP = lstm ? dp.data() + d * 3 * H : nullptr;
      for (int64_t s = steps - 1; s >= 0; --s) {
        const T* hp = hs.data() + s * B * H;
        std::fill(da.begin(), da.end(), T(0));
        for (int64_t bi = 0; bi < B; ++bi) {
          const int64_t t = time_of(s, bi);
          if (t < 0) continue;
          T* dhb = dh.data() + bi * H;
          if (!dy.empty())
            for (int64_t j = 0; j < H; ++j) dhb[j] += dy[((t * D + d) * B + bi) * H + j];
          const T* a = pre.data() + (s * B + bi) * GH;
          const T* y = act.data() + (s * B + bi) * GH;
          T* g = da.data() + bi * GH;
          if (a_.cell == Cell::Rnn) {
            for (int64_t j = 0; j < H; ++j) g[j] = dhb[j] * F.derivative(y[j], a[j]) * mask(a[j]);
          } else if (gru) {
            for (int64_t j = 0; j < H; ++j) {
              g[j] =
                  dhb[j] * (hp[bi * H + j] - y[2 * H + j]) * F.derivative(y[j], a[j]) * mask(a[j]);
              g[2 * H + j] = dhb[j] * (1 - y[j]) * Gf.derivative(y[2 * H + j], a[2 * H + j]) *
                             mask(a[2 * H + j]);
            }
          } else {
            const T* cp = cs.data() + (s * B + bi) * H;
            const T* cn = cs.data() + ((s + 1) * B + bi) * H;
            T* dcb = dc.data() + bi * H;
            for (int64_t j = 0; j < H; ++j) {
              const T hc = Hf(cn[j]);
              g[H + j] = dhb[j] * hc * F.derivative(y[H + j], a[H + j]) * mask(a[H + j]);
              const T dcn =
                  dcb[j] + dhb[j] * y[H + j] * Hf.derivative(hc, cn[j]) + g[H + j] * P[H + j];
              const T dforget = dcn * cp[j];
              T dinput = dcn * y[3 * H + j];
              if (a_.input_forget)
                dinput -= dforget;
              else
                g[2 * H + j] =
                    dforget * F.derivative(y[2 * H + j], a[2 * H + j]) * mask(a[2 * H + j]);
              g[j] = dinput * F.derivative(y[j], a[j]) * mask(a[j]);
              g[3 * H + j] =
                  dcn * y[j] * Gf.derivative(y[3 * H + j], a[3 * H + j]) * mask(a[3 * H + j]);
              dcb[j] = dcn * y[2 * H + j] + g[j] * P[j] + g[2 * H + j] * P[2 * H + j];
              dP[j] += g[j] * cp[j];
              dP[2 * H + j] += g[2 * H + j] * cp[j];
              dP[H + j] += g[H + j] * cn[j];
            }
          }
        }
        // What reaches h_prev: directly (GRU's z h_prev; a finished element's whole gradient)
        // and through R.
        for (int64_t bi = 0; bi < B; ++bi)
          for (int64_t j = 0; j < H; ++j)
            dhp[bi * H + j] = time_of(s, bi) < 0 ? dh[bi * H + j]
                              : gru              ? dh[bi * H + j] * act[(s * B + bi) * GH + j]
                                                 : T(0);
        if (gru) {
          if (lbr) {  // the candidate's R term was r * (h_prev R_h^T + Rb_h)
            for (int64_t bi = 0; bi < B; ++bi)
              for (int64_t j = 0; j < H; ++j) {
                T* g = da.data() + bi * GH;
                const T* y = act.data() + (s * B + bi) * GH;
                const T* a = pre.data() + (s * B + bi) * GH;
                if (time_of(s, bi) < 0) continue;
                const T dr_gate = g[2 * H + j] * hr[(s * B + bi) * H + j];
                g[H + j] = dr_gate * F.derivative(y[H + j], a[H + j]) * mask(a[H + j]);
              }
          } else {  // (r * h_prev) R_h^T: ds = da_h R_h, then r and h_prev
            gemm<T>(false, false, B, H, H, T(1), da.data() + 2 * H, GH, R + 2 * H * H, H, T(0),
                    ds.data(), H);
            gemm<T>(true, false, H, H, B, T(1), da.data() + 2 * H, GH, sr.data() + s * B * H, H,
                    T(1), dR + 2 * H * H, H);
            for (int64_t bi = 0; bi < B; ++bi) {
              if (time_of(s, bi) < 0) continue;
              T* g = da.data() + bi * GH;
              const T* y = act.data() + (s * B + bi) * GH;
              const T* a = pre.data() + (s * B + bi) * GH;
              for (int64_t j = 0; j < H; ++j) {
                dRb[2 * H + j] += g[2 * H + j];
                g[H + j] = ds[bi * H + j] * hp[bi * H + j] * F.derivative(y[H + j], a[H + j]) *
                           mask(a[H + j]);
                dhp[bi * H + j] += ds[bi * H + j] * y[H + j];
              }
            }
          }
        }
        // Every gate's pre-activation had x W^T + Wb; all but GRU's candidate without
        // linear_before_reset had h_prev R^T + Rb (with lbr, the candidate's through r).
        dq = da;  // the gradient of h_prev R^T + Rb
        for (int64_t bi = 0; bi < B; ++bi) {
          const int64_t t = time_of(s, bi);
          if (t < 0) continue;
          std::copy_n(da.data() + bi * GH, GH, dx_pre.data() + (t * B + bi) * GH);
          if (gru)
            for (int64_t j = 0; j < H; ++j)
              dq[bi * GH + 2 * H + j] =
                  lbr ? da[bi * GH + 2 * H + j] * act[(s * B + bi) * GH + H + j] : T(0);
        }
        const int64_t rcols = gru && !lbr ? 2 * H : GH;
        gemm<T>(false, false, B, H, rcols, T(1), dq.data(), GH, R, H, T(1), dhp.data(), H);
        gemm<T>(true, false, rcols, H, B, T(1), dq.data(), GH, hp, H, T(1), dR, H);
        for (int64_t bi = 0; bi < B; ++bi)
          for (int64_t k = 0; k < rcols; ++k) dRb[k] += dq[bi * GH + k];
        dh = dhp;
      }
      std::copy(dh.begin(), dh.end(), dh0.begin() + d * B * H);
      if (lstm) std::copy(dc.begin(), dc.end(), dc0.begin() + d * B * H);
      // The input side, every step at once: dW += dx_pre^T x, dX += dx_pre W, dWb += sums.
      gemm<T>(true, false, GH, I, S * B, T(1), dx_pre.data(), GH, x.data(), I, T(1),
              dw.data() + d * GH * I, I);
      gemm<T>(false, false, S * B, I, GH, T(1), dx_pre.data(), GH, W, I, T(1), dx.data(), I);
      for (int64_t k = 0; k < S * B; ++k)
        for (int64_t j = 0; j < GH; ++j) dWb[j] += dx_pre[k * GH + j];
    }
    std::vector<T> dx_out(dx.size());
    for (int64_t t = 0; t < S; ++t)
      for (int64_t bi = 0; bi < B; ++bi)
        std::copy_n(dx.begin() + (t * B + bi) * I, I,
                    dx_out.begin() + (a_.layout ? bi * S + t : t * B + bi) * I);
    put(ctx, kDX, dx_out);
    put(ctx, kDW, dw);
    put(ctx, kDR, dr);
    put(ctx, kDB, db);
    put(ctx, kDH0, reorder_state(dh0, B, H, false));
    if (lstm) {
      put(ctx, kDC0, reorder_state(dc0, B, H, false));
      put(ctx, kDP, dp);
    }
  }

  // An activation and its derivative from its output y (and input a, for Relu).
  struct Activation {
    enum Kind { Sigmoid, Tanh, Relu } kind;
    explicit Activation(const std::string& name)
        : kind(name == "Sigmoid" ? Sigmoid : (name == "Tanh" ? Tanh : Relu)) {}
    template <class T>
    T operator()(T v) const {
      if (kind == Sigmoid) return 1 / (1 + std::exp(-v));
      if (kind == Tanh) return std::tanh(v);
      return v > 0 ? v : T(0);
    }
    template <class T>
    T derivative(T y, T a) const {
      if (kind == Sigmoid) return y * (1 - y);
      if (kind == Tanh) return 1 - y * y;
      return a > 0 ? T(1) : T(0);
    }
  };

  // A state between the node's layout ([batch, dir, h] when layout is 1) and the [dir, batch, h]
  // the loops use: to_dir_major, or back.
  template <class T>
  std::vector<T> reorder_state(const std::vector<T>& v, int64_t batch, int64_t h,
                               bool to_dir_major) const {
    if (!a_.layout) return v;
    std::vector<T> out(v.size());
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t d = 0; d < a_.dirs; ++d) {
        const int64_t node = (b * a_.dirs + d) * h, loops = (d * batch + b) * h;
        std::copy_n(v.begin() + (to_dir_major ? node : loops), h,
                    out.begin() + (to_dir_major ? loops : node));
      }
    return out;
  }

  template <class T>
  static void put(RunContext& ctx, size_t o, const std::vector<T>& v) {
    if (o < ctx.output_count() && ctx.has_output(o))
      from_doubles(ctx.output(o), std::vector<double>(v.begin(), v.end()));
  }

  RecurrentAttrs a_;
  RecurrentSpec spec_;
};

}  // namespace

VOLT_REGISTER_KERNEL(recurrent_grad, volt_kernel("RecurrentGrad", make_kernel<RecurrentGrad>));

}  // namespace volt
