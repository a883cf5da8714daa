// The update rules of the ai.onnx.preview.training optimizers, element by element. The ONNX
// ops (operators/cpu/optimizers.cpp) and volt's trainer share these, so both follow the spec.
#pragma once
#include <cmath>
#include <cstdint>

namespace volt::optim {

// Adagrad: r = lr / (1 + t * decay); g' = norm * x + g; h += g'^2; x -= r * g' / (sqrt(h) + eps).
struct Adagrad {
  double lr, decay, epsilon, norm;
  int64_t t;
  void update(double& x, double g, double& h) const {
    const double r = lr / (1 + static_cast<double>(t) * decay);
    const double gr = norm * x + g;
    h += gr * gr;
    x -= r * gr / (std::sqrt(h) + epsilon);
  }
};

// Momentum (standard or Nesterov): g' = norm * x + g; v = alpha * v + beta' * g' where beta' is
// beta after the first step and 1 on it; x -= lr * v (or lr * (g' + alpha * v) for Nesterov).
struct Momentum {
  double lr, alpha, beta, norm;
  bool nesterov;
  int64_t t;
  void update(double& x, double g, double& v) const {
    const double gr = norm * x + g;
    v = alpha * v + (t > 0 ? beta : 1.0) * gr;
    x -= lr * (nesterov ? gr + alpha * v : v);
  }
};

// Adam with the spec's bias correction folded into the learning rate, and an optional decay
// applied after the step (norm_coefficient_post).
struct Adam {
  double lr, alpha, beta, epsilon, norm, norm_post;
  int64_t t;
  void update(double& x, double g, double& v, double& h) const {
    const double gr = norm * x + g;
    v = alpha * v + (1 - alpha) * gr;
    h = beta * h + (1 - beta) * gr * gr;
    const double r = t > 0 ? lr * std::sqrt(1 - std::pow(beta, static_cast<double>(t))) /
                                 (1 - std::pow(alpha, static_cast<double>(t)))
                           : lr;
    x = (1 - norm_post) * (x - r * v / (std::sqrt(h) + epsilon));
  }
};

}  // namespace volt::optim
