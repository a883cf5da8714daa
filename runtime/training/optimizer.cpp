#include "runtime/training/optimizer.hpp"

#include <algorithm>

#include "operators/common/dispatch.hpp"
#include "operators/common/optimizer_math.hpp"
#include "runtime/error.hpp"

namespace volt {

Tensor& Optimizer::slot(const std::string& kind, const std::string& name, const Tensor& like) {
  auto& m = state_[kind];
  auto it = m.find(name);
  if (it == m.end())
    it = m.emplace(name, Tensor::empty(like.dtype(), like.shape())).first;  // zero-filled
  return it->second;
}

namespace {

// A dense step works on chunks of the flat tensor, so threads share the work.
constexpr int64_t kChunk = 16384;
// How many runs ahead the rows of a lazy update are prefetched.
constexpr int64_t kAhead = 4;

// Applies the configured rule to `rows` runs of `width` elements: run k updates x, its state and
// reads the gradient at x_offset(k) / g_offset(k). A dense step is one run over the whole
// tensor; a lazy row-sparse step is one run per touched row. One implementation for both, so
// they cannot drift apart.
template <class XOffset, class GOffset, class Width>
void apply_rule(const TrainConfig& c, Tensor& x, const Tensor& grad, Tensor* s1, Tensor* s2,
                double lr, int64_t t, int64_t runs, Width run_width, XOffset x_offset,
                GOffset g_offset, const std::string& name) {
  dispatch_numeric(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = typename Compute<T>::type;
    if constexpr (!std::is_floating_point_v<C>) {
      fail(ErrorCode::InvalidArgument, "parameter '" + name + "' is not floating point");
    } else {
      T* px = static_cast<T*>(x.raw());
      const T* pg = static_cast<const T*>(grad.raw());
      T* p1 = s1 ? static_cast<T*>(s1->raw()) : nullptr;
      T* p2 = s2 ? static_cast<T*>(s2->raw()) : nullptr;
      const optim::Momentum momentum{lr, c.momentum, 1.0, c.weight_decay, c.nesterov, t};
      const bool decoupled = c.optimizer == "adamw";
      const optim::Adam adam_rule{
          lr, c.beta1, c.beta2, c.epsilon, decoupled ? 0.0 : c.weight_decay, 0.0, t};
      const optim::Adagrad adagrad{lr, 0.0, c.epsilon, c.weight_decay, t};
      // Arithmetic in the weights' own precision for float and double; float for 16-bit.
      using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
      const S rate = static_cast<S>(adam_rule.rate()), wd = static_cast<S>(c.weight_decay),
              slr = static_cast<S>(lr);
      const S decay = decoupled ? 1 - slr * wd : S(1);  // AdamW: decay apart from the gradient
      auto load = [](const T* p, int64_t i) { return static_cast<S>(static_cast<C>(p[i])); };
      auto put = [](T* p, int64_t i, S v) { p[i] = static_cast<T>(static_cast<C>(v)); };
      const int kind = c.optimizer == "sgd" ? (p1 ? 1 : 0) : c.optimizer == "adagrad" ? 3 : 2;
      // One loop per rule, with no branches inside, so each vectorizes; runs in parallel.
#pragma omp parallel for if (runs > 1 && x.numel() > 65536)
      for (int64_t k = 0; k < runs; ++k) {
        const int64_t xo = x_offset(k), go = g_offset(k), width = run_width(k);
        // Rows of a lazy update lie anywhere in the table: ask for the next ones now, so their
        // cache misses overlap this row's arithmetic.
        if (width <= 1024 && k + kAhead < runs) {  // rows, not the chunks of a dense step
          const int64_t next = x_offset(k + kAhead);
          for (int64_t l = 0; l < width; l += 16) {
            __builtin_prefetch(px + next + l, 1);
            if (p1) __builtin_prefetch(p1 + next + l, 1);
            if (p2) __builtin_prefetch(p2 + next + l, 1);
          }
        }
        T *X = px + xo, *M = p1 ? p1 + xo : nullptr, *V = p2 ? p2 + xo : nullptr;
        const T* G = pg + go;
        if (kind == 1) {
#pragma omp simd
          for (int64_t i = 0; i < width; ++i) {
            S xv = load(X, i), v = load(M, i);
            momentum.update(xv, load(G, i), v);
            put(M, i, v);
            put(X, i, xv);
          }
        } else if (kind == 0) {
#pragma omp simd
          for (int64_t i = 0; i < width; ++i) {
            const S xv = load(X, i);
            put(X, i, xv - slr * (load(G, i) + wd * xv));
          }
        } else if (kind == 3) {
#pragma omp simd
          for (int64_t i = 0; i < width; ++i) {
            S xv = load(X, i), h = load(M, i);
            adagrad.update(xv, load(G, i), h);
            put(M, i, h);
            put(X, i, xv);
          }
        } else {
#pragma omp simd
          for (int64_t i = 0; i < width; ++i) {
            S xv = load(X, i) * decay, m = load(M, i), v = load(V, i);
            adam_rule.update(xv, load(G, i), m, v, rate);
            put(M, i, m);
            put(V, i, v);
            put(X, i, xv);
          }
        }
      }
    }
  });
}

}  // namespace

std::pair<Tensor*, Tensor*> Optimizer::slots_for(const std::string& name, const Tensor& x) {
  const std::string& o = c_.optimizer;
  if (o == "sgd") return {c_.momentum > 0 ? &slot("velocity", name, x) : nullptr, nullptr};
  if (o == "adagrad") return {&slot("h", name, x), nullptr};
  return {&slot("m", name, x), &slot("v", name, x)};
}

void Optimizer::step(std::map<std::string, Tensor>& params,
                     const std::map<std::string, Tensor>& grads, double lr, int64_t t) {
  for (const auto& [name, grad] : grads) {
    Tensor& x = params.at(name);
    auto [s1, s2] = slots_for(name, x);
    const int64_t n = x.numel(), chunks = (n + kChunk - 1) / kChunk;
    apply_rule(
        c_, x, grad, s1, s2, lr, t, chunks,
        [n](int64_t k) { return std::min(kChunk, n - k * kChunk); },
        [](int64_t k) { return k * kChunk; }, [](int64_t k) { return k * kChunk; }, name);
  }
}

void Optimizer::step_rows(std::map<std::string, Tensor>& params,
                          const std::map<std::string, RowSparse>& grads, double lr, int64_t t) {
  for (const auto& [name, g] : grads) {
    Tensor& x = params.at(name);
    const int64_t width = x.dim(0) ? x.numel() / x.dim(0) : 0;
    const int64_t* rows = g.rows.data<int64_t>();
    auto [s1, s2] = slots_for(name, x);
    apply_rule(
        c_, x, g.values, s1, s2, lr, t, g.rows.numel(), [width](int64_t) { return width; },
        [rows, width](int64_t k) { return rows[k] * width; },
        [width](int64_t k) { return k * width; }, name);
  }
}

void Optimizer::save(Checkpoint& c) const {
  for (const auto& [kind, m] : state_)
    for (const auto& [name, t] : m) c.tensors["state/" + kind + "/" + name] = t.clone();
}

void Optimizer::load(const Checkpoint& c, const std::map<std::string, Tensor>& params,
                     const std::string& source) {
  std::map<std::string, std::map<std::string, Tensor>> loaded;
  for (const auto& [key, t] : c.tensors) {
    if (key.rfind("state/", 0) != 0) continue;
    const size_t slash = key.find('/', 6);
    VOLT_CHECK(slash != std::string::npos, InvalidArgument,
               source + ": bad optimizer state entry '" + key + "'");
    const std::string kind = key.substr(6, slash - 6), name = key.substr(slash + 1);
    auto p = params.find(name);
    VOLT_CHECK(p != params.end(), InvalidArgument,
               source + ": optimizer state for '" + name + "', which the model does not train");
    VOLT_CHECK(p->second.shape() == t.shape() && p->second.dtype() == t.dtype(), InvalidArgument,
               source + ": optimizer state '" + key + "' is " + dtype_name(t.dtype()) +
                   shape_str(t.shape()) + ", the parameter is " + dtype_name(p->second.dtype()) +
                   shape_str(p->second.shape()));
    loaded[kind][name] = t.clone();
  }
  state_ = std::move(loaded);
}

}  // namespace volt
