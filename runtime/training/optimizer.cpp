#include "runtime/training/optimizer.hpp"

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

void Optimizer::step(std::map<std::string, Tensor>& params,
                     const std::map<std::string, Tensor>& grads, double lr, int64_t t) {
  for (const auto& named : grads) {
    const std::string& name = named.first;  // (clang 14 cannot capture structured bindings)
    const Tensor& grad = named.second;
    Tensor& x = params.at(name);
    const bool adam = c_.optimizer != "sgd";
    Tensor* s1 = adam || c_.momentum > 0 ? &slot(adam ? "m" : "velocity", name, x) : nullptr;
    Tensor* s2 = adam ? &slot("v", name, x) : nullptr;
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
        const int64_t n = x.numel();
        const optim::Momentum momentum{lr, c_.momentum, 1.0, c_.weight_decay, c_.nesterov, t};
        const bool decoupled = c_.optimizer == "adamw",
                   sgd = !adam;  // decided once, not per element
        const optim::Adam adam_rule{
            lr, c_.beta1, c_.beta2, c_.epsilon, decoupled ? 0.0 : c_.weight_decay, 0.0, t};
        // Arithmetic in the weights' own precision for float and double; float for 16-bit.
        using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
        const S rate = static_cast<S>(adam_rule.rate()), wd = static_cast<S>(c_.weight_decay),
                slr = static_cast<S>(lr);
        // One loop per rule, with no branches inside, so each vectorizes.
        auto load = [](const T* p, int64_t i) { return static_cast<S>(static_cast<C>(p[i])); };
        auto put = [](T* p, int64_t i, S v) { p[i] = static_cast<T>(static_cast<C>(v)); };
        if (sgd && p1) {
#pragma omp parallel for simd if (n > 65536)
          for (int64_t i = 0; i < n; ++i) {
            S xv = load(px, i), v = load(p1, i);
            momentum.update(xv, load(pg, i), v);
            put(p1, i, v);
            put(px, i, xv);
          }
        } else if (sgd) {
#pragma omp parallel for simd if (n > 65536)
          for (int64_t i = 0; i < n; ++i) {
            const S xv = load(px, i);
            put(px, i, xv - slr * (load(pg, i) + wd * xv));
          }
        } else {
          const S decay = decoupled ? 1 - slr * wd : S(1);  // AdamW: decay apart from the gradient
#pragma omp parallel for simd if (n > 65536)
          for (int64_t i = 0; i < n; ++i) {
            S xv = load(px, i) * decay, m = load(p1, i), v = load(p2, i);
            adam_rule.update(xv, load(pg, i), m, v, rate);
            put(p1, i, m);
            put(p2, i, v);
            put(px, i, xv);
          }
        }
      }
    });
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
