// The update rules of the ai.onnx.preview.training optimizers, element by element. The ONNX
// ops (operators/cpu/optimizers.cpp) and volt's trainer share these, so both follow the spec.
// S is the arithmetic type: double for the ONNX ops, the weights' own float type in training.
#pragma once
#include <cmath>
#include <cstdint>

// The updates also run in CUDA kernels (operators/cuda/optimizers.cu).
#ifdef __CUDACC__
#define VOLT_HOST_DEVICE __host__ __device__
#else
#define VOLT_HOST_DEVICE
#endif

namespace volt {

// Which of the rules below an optimizer op applies.
enum class OptimizerRule { Adagrad, Momentum, Adam };

namespace optim {

// Adagrad: r = lr / (1 + t * decay); g' = norm * x + g; h += g'^2; x -= r * g' / (sqrt(h) + eps).
struct Adagrad {
  double lr, decay, epsilon, norm;
  int64_t t;
  template <class S>
  VOLT_HOST_DEVICE void update(S& x, S g, S& h) const {
    const S r = static_cast<S>(lr / (1 + static_cast<double>(t) * decay));
    const S gr = static_cast<S>(norm) * x + g;
    h += gr * gr;
    x -= r * gr / (std::sqrt(h) + static_cast<S>(epsilon));
  }
};

// Momentum (standard or Nesterov): g' = norm * x + g; v = alpha * v + beta' * g' where beta' is
// beta after the first step and 1 on it; x -= lr * v (or lr * (g' + alpha * v) for Nesterov).
struct Momentum {
  double lr, alpha, beta, norm;
  bool nesterov;
  int64_t t;
  template <class S>
  VOLT_HOST_DEVICE void update(S& x, S g, S& v) const {
    const S gr = static_cast<S>(norm) * x + g;
    v = static_cast<S>(alpha) * v + static_cast<S>(t > 0 ? beta : 1.0) * gr;
    x -= static_cast<S>(lr) * (nesterov ? gr + static_cast<S>(alpha) * v : v);
  }
};

// Adam with the spec's bias correction folded into the learning rate, and an optional decay
// applied after the step (norm_coefficient_post).
struct Adam {
  double lr, alpha, beta, epsilon, norm, norm_post;
  int64_t t;
  // The bias-corrected rate, computed once per step.
  double rate() const {
    return t > 0 ? lr * std::sqrt(1 - std::pow(beta, static_cast<double>(t))) /
                       (1 - std::pow(alpha, static_cast<double>(t)))
                 : lr;
  }
  template <class S>
  VOLT_HOST_DEVICE void update(S& x, S g, S& v, S& h, S r) const {
    const S gr = static_cast<S>(norm) * x + g;
    v = static_cast<S>(alpha) * v + static_cast<S>(1 - alpha) * gr;
    h = static_cast<S>(beta) * h + static_cast<S>(1 - beta) * gr * gr;
    x = static_cast<S>(1 - norm_post) * (x - r * v / (std::sqrt(h) + static_cast<S>(epsilon)));
  }
  template <class S>
  void update(S& x, S g, S& v, S& h) const {
    update(x, g, v, h, static_cast<S>(rate()));
  }
};

}  // namespace optim
}  // namespace volt
