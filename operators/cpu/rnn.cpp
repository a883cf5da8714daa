// RNN, GRU and LSTM: every direction, both layouts, custom activations with their alpha/beta,
// clip, sequence_lens, initial states, peepholes, input_forget and linear_before_reset.
// fp32 LSTMs and GRUs at small batches on volt's own loop (recurrent_rows), the rest in fp32 on
// oneDNN's RNN primitives where they compute the same cell (rnn_dnnl); a reference loop in double
// precision for the rest.
#include <cmath>
#include <functional>

#include "operators/common/dispatch.hpp"
#include "operators/common/tensor_values.hpp"
#include "operators/cpu/recurrent_rows.hpp"
#include "operators/cpu/rnn_attrs.hpp"
#include "operators/cpu/rnn_dnnl.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

using Activation = std::function<double(double)>;

// What infer() prepared: one of the two fast paths (neither: the reference loop).
struct RecurrentState {
  std::shared_ptr<const RecurrentRows> rows;
  std::shared_ptr<void> primitive;
};

Activation activation(const std::string& name, float alpha, float beta, const Node& node) {
  if (name == "Relu") return [](double x) { return x > 0 ? x : 0; };
  if (name == "Tanh") return [](double x) { return std::tanh(x); };
  if (name == "Sigmoid") return [](double x) { return 1 / (1 + std::exp(-x)); };
  if (name == "Affine") return [=](double x) { return alpha * x + beta; };
  if (name == "LeakyRelu") return [=](double x) { return x >= 0 ? x : alpha * x; };
  if (name == "ThresholdedRelu") return [=](double x) { return x > alpha ? x : 0; };
  if (name == "ScaledTanh") return [=](double x) { return alpha * std::tanh(beta * x); };
  if (name == "HardSigmoid")
    return [=](double x) { return std::max(0.0, std::min(1.0, alpha * x + beta)); };
  if (name == "Elu") return [=](double x) { return x >= 0 ? x : alpha * (std::exp(x) - 1); };
  if (name == "Softsign") return [](double x) { return x / (1 + std::abs(x)); };
  if (name == "Softplus") return [](double x) { return std::log1p(std::exp(x)); };
  fail(ErrorCode::InvalidModel, node.describe() + ": unknown activation '" + name + "'");
}

class Recurrent final : public Kernel {
 public:
  Recurrent(const Node& n, Cell cell) {
    const RecurrentAttrs a = recurrent_attrs(n, cell);
    cell_ = cell;
    hidden_ = a.hidden;
    clip_ = a.clip;
    layout_ = a.layout;
    input_forget_ = a.input_forget;
    linear_before_reset_ = a.linear_before_reset;
    reverse_ = a.reverse;
    dirs_ = a.dirs;
    const std::vector<std::string>& names = a.activations;
    spec_ = recurrent_spec(a);
    for (size_t i = 0; i < names.size(); ++i)
      acts_.push_back(activation(names[i], a.params[i].first, a.params[i].second, n));
  }

  void infer(InferContext& ctx) const override {
    const Shape& x = ctx.shape(0);
    VOLT_CHECK(x.size() == 3, InvalidArgument, ctx.node().describe() + ": X must be 3-D");
    VOLT_CHECK(hidden_ || ctx.shape(2).size() == 3, InvalidArgument,
               ctx.node().describe() + ": R must be 3-D");
    const int64_t hidden = hidden_ ? hidden_ : ctx.shape(2)[2];
    const int64_t seq = layout_ ? x[1] : x[0], batch = layout_ ? x[0] : x[1];
    ctx.set_output(0, ctx.dtype(0),
                   layout_ ? Shape{batch, seq, dirs_, hidden} : Shape{seq, dirs_, batch, hidden});
    const Shape state = layout_ ? Shape{batch, dirs_, hidden} : Shape{dirs_, batch, hidden};
    if (ctx.output_count() > 1) ctx.set_output(1, ctx.dtype(0), state);
    if (ctx.output_count() > 2) ctx.set_output(2, ctx.dtype(0), state);
    auto st = std::make_shared<RecurrentState>();
    if ((st->rows = plan_recurrent_rows(ctx, spec_))) return ctx.set_state(st);
    try {
      st->primitive = prepare_dnnl_recurrent(ctx, spec_);
      ctx.set_state(st);
    } catch (const KernelUnsupported& u) {
      ctx.runs_reference_loop(u.reason);
    }
  }

  void run(RunContext& ctx) const override {
    if (const auto* st = static_cast<const RecurrentState*>(ctx.state_ptr()))
      return st->rows ? run_recurrent_rows(*st->rows, ctx)
                      : run_dnnl_recurrent(st->primitive.get(), ctx, spec_);
    const Tensor& xt = ctx.input(0);
    const int64_t seq = layout_ ? xt.dim(1) : xt.dim(0), batch = layout_ ? xt.dim(0) : xt.dim(1),
                  in = xt.dim(2);
    const int64_t gates = cell_ == Cell::Rnn ? 1 : (cell_ == Cell::Gru ? 3 : 4);
    const int64_t h = hidden_ ? hidden_ : ctx.input(2).dim(2);
    const auto x = to_doubles(xt), w = to_doubles(ctx.input(1)), r = to_doubles(ctx.input(2));
    VOLT_CHECK(static_cast<int64_t>(w.size()) == dirs_ * gates * h * in &&
                   static_cast<int64_t>(r.size()) == dirs_ * gates * h * h,
               InvalidArgument,
               ctx.node().describe() + ": W or R does not match hidden_size " + std::to_string(h));
    std::vector<double> b =
        ctx.has_input(3) ? to_doubles(ctx.input(3))
                         : std::vector<double>(static_cast<size_t>(dirs_ * 2 * gates * h), 0.0);
    // Every optional input must hold what its role says, or the loops below read past it.
    auto check_size = [&](size_t size, int64_t expected, const char* what) {
      VOLT_CHECK(static_cast<int64_t>(size) == expected, InvalidArgument,
                 ctx.node().describe() + ": " + what + " has " + std::to_string(size) +
                     " elements, expected " + std::to_string(expected));
    };
    check_size(b.size(), dirs_ * 2 * gates * h, "B");
    std::vector<int64_t> lens(static_cast<size_t>(batch), seq);
    if (ctx.has_input(4)) {
      const auto l = to_doubles(ctx.input(4));
      check_size(l.size(), batch, "sequence_lens");
      for (int64_t i = 0; i < batch; ++i)
        lens[i] = std::clamp<int64_t>(static_cast<int64_t>(l[i]), 0, seq);
    }
    auto state_in = [&](size_t i) {
      if (!ctx.has_input(i))
        return std::vector<double>(static_cast<size_t>(dirs_ * batch * h), 0.0);
      auto v = to_doubles(ctx.input(i));
      check_size(v.size(), dirs_ * batch * h, i == 5 ? "initial_h" : "initial_c");
      return layout_ ? to_dir_major(v, batch, h) : v;
    };
    std::vector<double> H = state_in(5),
                        C = cell_ == Cell::Lstm ? state_in(6) : std::vector<double>{};
    const std::vector<double> P =
        cell_ == Cell::Lstm && ctx.has_input(7)
            ? to_doubles(ctx.input(7))
            : std::vector<double>(static_cast<size_t>(dirs_ * 3 * h), 0.0);
    if (cell_ == Cell::Lstm) check_size(P.size(), dirs_ * 3 * h, "P");
    std::vector<double> Y(static_cast<size_t>(seq * dirs_ * batch * h),
                          0.0);  // [seq, dir, batch, h]
    const size_t per_dir = acts_.size() / static_cast<size_t>(dirs_);
    auto clip = [&](double v) {
      return clip_ > 0 ? std::clamp(v, -static_cast<double>(clip_), static_cast<double>(clip_)) : v;
    };

    for (int64_t d = 0; d < dirs_; ++d) {
      const bool backwards = reverse_ || d == 1;
      const double* W = w.data() + d * gates * h * in;
      const double* R = r.data() + d * gates * h * h;
      const double* Wb = b.data() + d * 2 * gates * h;
      const double* Rb = Wb + gates * h;
      const double* Pd = P.data() + d * 3 * h;
      const Activation& f = acts_[d * per_dir];
      const Activation& g = acts_[d * per_dir + (per_dir > 1 ? 1 : 0)];
      const Activation& hh = acts_[d * per_dir + (per_dir > 2 ? 2 : 0)];
      for (int64_t bi = 0; bi < batch; ++bi) {
        double* Hb = H.data() + (d * batch + bi) * h;
        double* Cb = cell_ == Cell::Lstm ? C.data() + (d * batch + bi) * h : nullptr;
        for (int64_t step = 0; step < lens[bi]; ++step) {
          const int64_t t = backwards ? lens[bi] - 1 - step : step;
          const double* xv = x.data() + (layout_ ? (bi * seq + t) : (t * batch + bi)) * in;
          // xw[g*h + j] = x . W[g*h + j] + Wb; hr likewise with H and R.
          std::vector<double> xw(static_cast<size_t>(gates * h)),
              hr(static_cast<size_t>(gates * h));
          for (int64_t k = 0; k < gates * h; ++k) {
            double s = Wb[k], q = Rb[k];
            for (int64_t i = 0; i < in; ++i) s += xv[i] * W[k * in + i];
            for (int64_t i = 0; i < h; ++i) q += Hb[i] * R[k * h + i];
            xw[k] = s;
            hr[k] = q;
          }
          std::vector<double> next(static_cast<size_t>(h));
          if (cell_ == Cell::Rnn) {
            for (int64_t j = 0; j < h; ++j) next[j] = f(clip(xw[j] + hr[j]));
          } else if (cell_ == Cell::Gru) {
            std::vector<double> z(static_cast<size_t>(h)), rr(static_cast<size_t>(h));
            for (int64_t j = 0; j < h; ++j) {
              z[j] = f(clip(xw[j] + hr[j]));
              rr[j] = f(clip(xw[h + j] + hr[h + j]));
            }
            if (linear_before_reset_) {
              for (int64_t j = 0; j < h; ++j)
                next[j] = g(clip(xw[2 * h + j] + rr[j] * hr[2 * h + j]));
            } else {  // the reset gate scales H before it meets R_h
              for (int64_t j = 0; j < h; ++j) {
                double q = Rb[2 * h + j];
                for (int64_t i = 0; i < h; ++i) q += rr[i] * Hb[i] * R[(2 * h + j) * h + i];
                next[j] = g(clip(xw[2 * h + j] + q));
              }
            }
            for (int64_t j = 0; j < h; ++j) next[j] = (1 - z[j]) * next[j] + z[j] * Hb[j];
          } else {
            for (int64_t j = 0; j < h; ++j) {
              double gi = xw[j] + hr[j] + Pd[j] * Cb[j];
              double go = xw[h + j] + hr[h + j];
              double gf = xw[2 * h + j] + hr[2 * h + j] + Pd[2 * h + j] * Cb[j];
              const double gc = g(clip(xw[3 * h + j] + hr[3 * h + j]));
              gi = f(clip(gi));
              gf = input_forget_ ? 1 - gi : f(clip(gf));
              const double c = gf * Cb[j] + gi * gc;
              go = f(clip(go + Pd[h + j] * c));
              Cb[j] = c;
              next[j] = go * hh(c);
            }
          }
          std::copy(next.begin(), next.end(), Hb);
          std::copy(next.begin(), next.end(), Y.begin() + ((t * dirs_ + d) * batch + bi) * h);
        }
      }
    }
    write_outputs(ctx, Y, H, C, seq, batch, h);
  }

 private:
  // [batch, dir, h] -> [dir, batch, h]
  std::vector<double> to_dir_major(const std::vector<double>& v, int64_t batch, int64_t h) const {
    std::vector<double> out(v.size());
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t d = 0; d < dirs_; ++d)
        for (int64_t j = 0; j < h; ++j) out[(d * batch + b) * h + j] = v[(b * dirs_ + d) * h + j];
    return out;
  }

  void write_outputs(RunContext& ctx, const std::vector<double>& Y, const std::vector<double>& H,
                     const std::vector<double>& C, int64_t seq, int64_t batch, int64_t h) const {
    auto put = [&](size_t out, const std::vector<double>& src, bool sequence) {
      if (!ctx.has_output(out)) return;
      Tensor& t = ctx.output(out);
      dispatch_numeric(t.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* p = static_cast<T*>(t.raw());
        for (size_t i = 0; i < src.size(); ++i) {
          size_t dst = i;
          if (layout_) {  // [seq, dir, batch, h] -> [batch, seq, dir, h]; [dir, batch, h] ->
                          // [batch, dir, h]
            const int64_t j = static_cast<int64_t>(i) % h;
            int64_t rest = static_cast<int64_t>(i) / h;
            const int64_t b = rest % batch;
            rest /= batch;
            const int64_t d = rest % dirs_;
            const int64_t s = rest / dirs_;
            dst = static_cast<size_t>(sequence ? ((b * seq + s) * dirs_ + d) * h + j
                                               : (b * dirs_ + d) * h + j);
          }
          p[dst] = static_cast<T>(static_cast<typename Compute<T>::type>(src[i]));
        }
      });
    };
    put(0, Y, true);
    put(1, H, false);
    if (cell_ == Cell::Lstm) put(2, C, false);
  }

  Cell cell_ = Cell::Lstm;
  int64_t hidden_ = 0;
  float clip_ = 0;
  int64_t layout_ = 0;
  bool input_forget_ = false, linear_before_reset_ = false, reverse_ = false;
  int dirs_ = 1;
  std::vector<Activation> acts_;
  RecurrentSpec spec_;
};

}  // namespace

VOLT_REGISTER_KERNEL(rnn, {.op = "RNN", .types = kFloatTypes, .create = [](const Node& n) {
                             return std::make_unique<Recurrent>(n, Cell::Rnn);
                           }});
VOLT_REGISTER_KERNEL(gru, {.op = "GRU", .types = kFloatTypes, .create = [](const Node& n) {
                             return std::make_unique<Recurrent>(n, Cell::Gru);
                           }});
VOLT_REGISTER_KERNEL(lstm, {.op = "LSTM", .types = kFloatTypes, .create = [](const Node& n) {
                              return std::make_unique<Recurrent>(n, Cell::Lstm);
                            }});

}  // namespace volt
