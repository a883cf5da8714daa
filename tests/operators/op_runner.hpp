// Runs one op as a one-node model, in float32 (oneDNN where it applies) and float64 (the
// reference loops), so each optimized kernel is checked against the plain one.
#pragma once
#include <cmath>
#include <limits>
#include <random>

#include "model_builder.hpp"
#include "test_options.hpp"
#include "volt/volt.hpp"

namespace volt::testing {

using AttrFn = std::function<void(onnx::NodeProto&)>;

inline Tensor random_double(const Shape& shape, std::mt19937& rng, double lo = -1, double hi = 1) {
  Tensor t = Tensor::empty(DType::Double, shape);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = u(rng);
  return t;
}

inline Tensor cast_to(const Tensor& t, DType to) {
  Tensor out = Tensor::empty(to, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (to == DType::Float)
      out.data<float>()[i] = static_cast<float>(t.data<double>()[i]);
    else
      out.data<double>()[i] = t.data<double>()[i];
  }
  return out;
}

// Runs `op` on `inputs` (float64 values) computed in `dtype`; returns output 0 as float64.
// `reference`, where given, receives why the op ran its reference loop ("" if it did not).
inline Tensor run_op(const std::string& op, const std::vector<Tensor>& inputs, DType dtype,
                     const AttrFn& attrs = {}, int opset = 13, std::string* reference = nullptr) {
  ModelBuilder b(opset);
  std::vector<std::string> names;
  NamedValues feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    names.push_back("in" + std::to_string(i));
    b.input_any(names.back(), static_cast<int>(dtype));
    feeds.emplace_back(names.back(), cast_to(inputs[i], dtype));
  }
  b.output_any("out", static_cast<int>(dtype)).node(op, names, {"out"}, attrs, "op_under_test");
  const std::string bytes = b.bytes();
  Session s = Session::from_bytes(bytes.data(), bytes.size(), {.threads = test_threads(2)});
  RunProfile profile;
  Tensor out = s.run(feeds, {}, {.profile = &profile})[0].tensor();
  if (reference) {
    *reference = "";
    for (const ProfileEvent& e : profile.events)
      if (e.node == "op_under_test") *reference = e.reference;
  }
  Tensor d = Tensor::empty(DType::Double, out.shape());
  for (int64_t i = 0; i < out.numel(); ++i)
    d.data<double>()[i] = dtype == DType::Float ? out.data<float>()[i] : out.data<double>()[i];
  return d;
}

// The largest |a - b| / (1 + |b|).
inline double max_rel_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data<double>()[i], y = b.data<double>()[i];
    // (A NaN on one side only is a difference; std::max would drop it.)
    if (std::isnan(x) != std::isnan(y)) return std::numeric_limits<double>::infinity();
    if (x == y) continue;  // (equal infinities)
    m = std::max(m, std::abs(x - y) / (1 + std::abs(y)));
  }
  return m;
}

}  // namespace volt::testing
