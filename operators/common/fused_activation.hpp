// The activation a graph pass folded into the op before it (Conv today): which one, its
// parameters, as a oneDNN post-op and as a reference function. The pass writes the node
// attributes volt.activation ("Relu", "LeakyRelu", "Clip"), volt.alpha and volt.beta.
#pragma once
#include <dnnl.hpp>
#include <limits>

#include "runtime/graph.hpp"

namespace volt {

struct FusedActivation {
  enum class Kind { None, Relu, LeakyRelu, Clip };
  Kind kind = Kind::None;
  float alpha = 0;  // LeakyRelu: the negative slope; Clip: the lower bound
  float beta = 0;   // Clip: the upper bound

  static FusedActivation of(const Node& n) {
    FusedActivation a;
    const std::string k = n.attr_string("volt.activation", "");
    if (k.empty()) return a;
    if (k == "Relu")
      a.kind = Kind::Relu;
    else if (k == "LeakyRelu")
      a.kind = Kind::LeakyRelu;
    else if (k == "Clip")
      a.kind = Kind::Clip;
    else
      fail(ErrorCode::InvalidModel, n.describe() + ": unknown fused activation '" + k + "'");
    a.alpha = n.attr_float("volt.alpha", 0.0f);
    a.beta = n.attr_float("volt.beta", std::numeric_limits<float>::max());
    return a;
  }

  bool any() const { return kind != Kind::None; }

  void append_to(dnnl::post_ops& ops) const {
    switch (kind) {
      case Kind::None:
        break;
      case Kind::Relu:
        ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
        break;
      case Kind::LeakyRelu:
        ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, alpha, 0.0f);
        break;
      case Kind::Clip:
        ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip_v2, alpha, beta);
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
    }
    return x;
  }
};

}  // namespace volt
