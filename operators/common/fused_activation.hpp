// The activation a graph pass folded into the op before it (Conv, MatMul): which one, its
// parameters, as a oneDNN post-op and as a reference function. The pass writes the node
// attributes volt.activation ("Relu", "LeakyRelu", "Clip", "Gelu", "GeluTanh", "Sigmoid", "Tanh",
// "Elu", "HardSigmoid", "Swish" = x * sigmoid(x), "HardSwish" = x * hardsigmoid(x)), volt.alpha
// and volt.beta.
#pragma once
#include <dnnl.hpp>

#include <cmath>
#include <limits>
#include <utility>

#include "runtime/error.hpp"
#include "runtime/graph.hpp"

namespace volt {

struct FusedActivation {
  enum class Kind {
    None,
    Relu,
    LeakyRelu,
    Clip,
    Gelu,
    GeluTanh,
    Sigmoid,
    Tanh,
    Elu,
    HardSigmoid,
    Swish,
    HardSwish
  };
  Kind kind = Kind::None;
  float alpha = 0;  // LeakyRelu: the negative slope; Clip: the lower bound; Elu, HardSigmoid: alpha
  float beta = 0;   // Clip: the upper bound; HardSigmoid: beta

  // From the attributes <prefix>activation, <prefix>alpha and <prefix>beta (a node carrying two
  // fused activations names the second set differently).
  static FusedActivation of(const Node& n, const std::string& prefix = "volt.") {
    FusedActivation a;
    const std::string k = n.attr_string(prefix + "activation", "");
    if (k.empty()) return a;
    static const std::pair<const char*, Kind> kNames[] = {{"Relu", Kind::Relu},
                                                          {"LeakyRelu", Kind::LeakyRelu},
                                                          {"Clip", Kind::Clip},
                                                          {"Gelu", Kind::Gelu},
                                                          {"GeluTanh", Kind::GeluTanh},
                                                          {"Sigmoid", Kind::Sigmoid},
                                                          {"Tanh", Kind::Tanh},
                                                          {"Elu", Kind::Elu},
                                                          {"HardSigmoid", Kind::HardSigmoid},
                                                          {"Swish", Kind::Swish},
                                                          {"HardSwish", Kind::HardSwish}};
    for (const auto& [name, kind] : kNames)
      if (k == name) a.kind = kind;
    if (a.kind == Kind::None)
      fail(ErrorCode::InvalidModel, n.describe() + ": unknown fused activation '" + k + "'");
    a.alpha = n.attr_float(prefix + "alpha", 0.0f);
    a.beta = n.attr_float(prefix + "beta", std::numeric_limits<float>::max());
    return a;
  }

  bool any() const { return kind != Kind::None; }

  void append_to(dnnl::post_ops& ops) const {
    using alg = dnnl::algorithm;
    switch (kind) {
      case Kind::None:
        break;
      case Kind::Relu:
        ops.append_eltwise(1.0f, alg::eltwise_relu, 0.0f, 0.0f);
        break;
      case Kind::LeakyRelu:
        ops.append_eltwise(1.0f, alg::eltwise_relu, alpha, 0.0f);
        break;
      case Kind::Clip:
        ops.append_eltwise(1.0f, alg::eltwise_clip_v2, alpha, beta);
        break;
      case Kind::Gelu:
        ops.append_eltwise(1.0f, alg::eltwise_gelu_erf, 0.0f, 0.0f);
        break;
      case Kind::GeluTanh:
        ops.append_eltwise(1.0f, alg::eltwise_gelu_tanh, 0.0f, 0.0f);
        break;
      case Kind::Sigmoid:
        ops.append_eltwise(1.0f, alg::eltwise_logistic, 0.0f, 0.0f);
        break;
      case Kind::Tanh:
        ops.append_eltwise(1.0f, alg::eltwise_tanh, 0.0f, 0.0f);
        break;
      case Kind::Elu:
        ops.append_eltwise(1.0f, alg::eltwise_elu, alpha, 0.0f);
        break;
      case Kind::HardSigmoid:  // max(0, min(1, alpha x + beta)): a line, then a clamp
        ops.append_eltwise(1.0f, alg::eltwise_linear, alpha, beta);
        ops.append_eltwise(1.0f, alg::eltwise_clip_v2, 0.0f, 1.0f);
        break;
      case Kind::Swish:
        ops.append_eltwise(1.0f, alg::eltwise_swish, 1.0f, 0.0f);
        break;
      case Kind::HardSwish:
        ops.append_eltwise(1.0f, alg::eltwise_hardswish, 0.0f, 0.0f);
        break;
    }
  }

  // The same function as the unfused op (NaN stays NaN, as ONNX's Relu and Clip give it).
  template <class C>
  C apply(C x) const {
    switch (kind) {
      case Kind::None:
        return x;
      case Kind::Relu:
        return x < C(0) ? C(0) : x;
      case Kind::LeakyRelu:
        return x < C(0) ? C(alpha * x) : x;
      case Kind::Clip:
        return x < C(alpha) ? C(alpha) : (x > C(beta) ? C(beta) : x);
      case Kind::Gelu:
        return C(0.5) * x * (C(1) + std::erf(x / std::sqrt(C(2))));
      case Kind::GeluTanh: {
        const C k = std::sqrt(C(2) / C(3.14159265358979323846));
        return C(0.5) * x * (C(1) + std::tanh(k * (x + C(0.044715) * x * x * x)));
      }
      case Kind::Sigmoid:
        return C(1) / (C(1) + std::exp(-x));
      case Kind::Tanh:
        return std::tanh(x);
      case Kind::Elu:
        return x < C(0) ? C(alpha) * (std::exp(x) - C(1)) : x;
      case Kind::HardSigmoid:
        return hard_sigmoid(x, C(alpha), C(beta));
      case Kind::Swish:
        return x / (C(1) + std::exp(-x));
      case Kind::HardSwish:
        return x * hard_sigmoid(x, C(1) / C(6), C(0.5));
    }
    return x;
  }

 private:
  template <class C>
  static C hard_sigmoid(C x, C a, C b) {
    const C v = a * x + b;
    return v < C(0) ? C(0) : (v > C(1) ? C(1) : v);
  }
};

}  // namespace volt
