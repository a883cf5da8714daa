#include "runtime/training/optimizer.hpp"

#include <algorithm>

#include "operators/common/convert.hpp"
#include "operators/common/dispatch.hpp"
#include "operators/common/optimizer_math.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/simd_clones.hpp"
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

// What one step of the configured rule needs, computed once per parameter.
struct Rule {
  enum Kind { Sgd, Momentum, Adam, Adagrad } kind;
  optim::Momentum momentum;
  optim::Adam adam;
  optim::Adagrad adagrad;
  double rate, weight_decay, lr, decay;  // decay: AdamW's factor, apart from the gradient
};

// One run of `width` elements: x, its state (m, v where the rule keeps them) and the gradient.
// One loop per rule, with no branches inside, so each vectorizes. Arithmetic in S: the weights'
// own precision for float and double, float for 16-bit types.
template <class T, class S>
__attribute__((always_inline)) inline void update_run(const Rule& r, T* __restrict x,
                                                      const T* __restrict g, T* __restrict m,
                                                      T* __restrict v, int64_t width) {
  using C = typename Compute<T>::type;
  auto load = [](const T* p, int64_t i) { return static_cast<S>(static_cast<C>(p[i])); };
  auto put = [](T* p, int64_t i, S value) { p[i] = static_cast<T>(static_cast<C>(value)); };
  const S rate = static_cast<S>(r.rate), wd = static_cast<S>(r.weight_decay),
          lr = static_cast<S>(r.lr), decay = static_cast<S>(r.decay);
  // Momentum and Adagrad keep one state value per weight.
  auto with_one_state = [&](const auto& rule) __attribute__((always_inline)) {
    for (int64_t i = 0; i < width; ++i) {
      S xv = load(x, i), sv = load(m, i);
      rule.update(xv, load(g, i), sv);
      put(m, i, sv);
      put(x, i, xv);
    }
  };
  switch (r.kind) {
    case Rule::Momentum:
      with_one_state(r.momentum);
      break;
    case Rule::Adagrad:
      with_one_state(r.adagrad);
      break;
    case Rule::Sgd:
      for (int64_t i = 0; i < width; ++i) {
        const S xv = load(x, i);
        put(x, i, xv - lr * (load(g, i) + wd * xv));
      }
      break;
    case Rule::Adam:
      for (int64_t i = 0; i < width; ++i) {
        S xv = load(x, i) * decay, mv = load(m, i), vv = load(v, i);
        r.adam.update(xv, load(g, i), mv, vv, rate);
        put(m, i, mv);
        put(v, i, vv);
        put(x, i, xv);
      }
      break;
  }
}

// The float case, the one training runs, compiled for AVX-512 and AVX2 too.
VOLT_SIMD_CLONES void update_run_f32(const Rule& r, float* x, const float* g, float* m, float* v,
                                     int64_t width) {
  update_run<float, float>(r, x, g, m, v, width);
}

// Applies the configured rule to `runs` runs: run k updates x, its state and reads the gradient
// at x_offset(k) / g_offset(k). A dense step is one run per chunk of the flat tensor; a lazy
// row-sparse step is one run per touched row. One implementation for both, so they cannot
// drift apart.
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
      const bool decoupled = c.optimizer == "adamw";
      Rule r{c.optimizer == "sgd"       ? (p1 ? Rule::Momentum : Rule::Sgd)
             : c.optimizer == "adagrad" ? Rule::Adagrad
                                        : Rule::Adam,
             optim::Momentum{lr, c.momentum, 1.0, c.weight_decay, c.nesterov, t},
             optim::Adam{lr, c.beta1, c.beta2, c.epsilon, decoupled ? 0.0 : c.weight_decay, 0.0, t},
             optim::Adagrad{lr, 0.0, c.epsilon, c.weight_decay, t},
             0.0,
             c.weight_decay,
             lr,
             decoupled ? 1 - lr * c.weight_decay : 1.0};
      r.rate = r.adam.rate();
      using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
      parallel_for(runs, x.numel() > 65536, [&](int64_t k) {
        const int64_t xo = x_offset(k), go = g_offset(k), width = run_width(k);
        // Rows of a lazy update lie anywhere in the table: ask for the next ones now, so their
        // cache misses overlap this row's arithmetic.
        if (width <= 1024 && k + kAhead < runs) {  // rows, not the chunks of a dense step
          const int64_t next = x_offset(k + kAhead);
          for (int64_t l = 0; l < width; l += 64 / static_cast<int64_t>(sizeof(T))) {
            __builtin_prefetch(px + next + l, 1);
            if (p1) __builtin_prefetch(p1 + next + l, 1);
            if (p2) __builtin_prefetch(p2 + next + l, 1);
          }
        }
        T *X = px + xo, *M = p1 ? p1 + xo : nullptr, *V = p2 ? p2 + xo : nullptr;
        if constexpr (std::is_same_v<T, float>)
          update_run_f32(r, X, pg + go, M, V, width);
        else
          update_run<T, S>(r, X, pg + go, M, V, width);
      });
    }
  });
}

}  // namespace

namespace {

bool sixteen_bit(const Tensor& t) {
  return t.dtype() == DType::Float16 || t.dtype() == DType::BFloat16;
}

// Elements [begin, end) of the fp32 master copied into the 16-bit weight.
void store_master(const Tensor& master, Tensor& x, int64_t begin, int64_t end) {
  const float* m = master.data<float>();
  if (x.dtype() == DType::Float16) {
    Float16* p = x.data<Float16>();
    for (int64_t i = begin; i < end; ++i) p[i] = Float16(m[i]);
  } else {
    BFloat16* p = x.data<BFloat16>();
    for (int64_t i = begin; i < end; ++i) p[i] = BFloat16(m[i]);
  }
}

}  // namespace

// 16-bit weights are updated through an fp32 master copy with fp32 state: in their own
// precision an update smaller than half an ulp of the weight is lost, and Adam's v (squares of
// gradients) underflows to zero, which turns its step into m / epsilon.
Tensor& Optimizer::updated_copy(const std::string& name, Tensor& x) {
  if (!sixteen_bit(x)) return x;
  auto& m = state_["master"];
  auto it = m.find(name);
  if (it == m.end()) it = m.emplace(name, converted(x, DType::Float)).first;
  return it->second;
}

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
    Tensor& target = updated_copy(name, x);
    auto [s1, s2] = slots_for(name, target);
    const int64_t n = x.numel(), chunks = (n + kChunk - 1) / kChunk;
    apply_rule(
        c_, target, &target == &x ? grad : converted(grad, DType::Float), s1, s2, lr, t, chunks,
        [n](int64_t k) { return std::min(kChunk, n - k * kChunk); },
        [](int64_t k) { return k * kChunk; }, [](int64_t k) { return k * kChunk; }, name);
    if (&target != &x) store_master(target, x, 0, n);
  }
}

void Optimizer::step_rows(std::map<std::string, Tensor>& params,
                          const std::map<std::string, RowSparseTensor>& grads, double lr,
                          int64_t t) {
  for (const auto& [name, g] : grads) {
    Tensor& x = params.at(name);
    const int64_t width = x.dim(0) ? x.numel() / x.dim(0) : 0;
    const int64_t* rows = g.rows().data<int64_t>();
    Tensor& target = updated_copy(name, x);
    auto [s1, s2] = slots_for(name, target);
    apply_rule(
        c_, target, &target == &x ? g.values() : converted(g.values(), DType::Float), s1, s2, lr, t,
        g.row_count(), [width](int64_t) { return width; },
        [rows, width](int64_t k) { return rows[k] * width; },
        [width](int64_t k) { return k * width; }, name);
    if (&target != &x)
      for (int64_t k = 0; k < g.row_count(); ++k)
        store_master(target, x, rows[k] * width, (rows[k] + 1) * width);
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
    // 16-bit weights keep fp32 state (and an fp32 master copy).
    const DType state_type = sixteen_bit(p->second) ? DType::Float : p->second.dtype();
    VOLT_CHECK(p->second.shape() == t.shape() && t.dtype() == state_type, InvalidArgument,
               source + ": optimizer state '" + key + "' is " + dtype_name(t.dtype()) +
                   shape_str(t.shape()) + ", the parameter is " + dtype_name(p->second.dtype()) +
                   shape_str(p->second.shape()));
    loaded[kind][name] = t.clone();
  }
  state_ = std::move(loaded);
}

}  // namespace volt
