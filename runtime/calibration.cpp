// precision = int8 with a calibration batch: the ranges of the values the quantized layers read,
// measured by running the model once in fp32 with those values as extra outputs.
#include "runtime/calibration.hpp"

#include <algorithm>
#include <cmath>

#include "runtime/passes/passes.hpp"
#include "runtime/session_impl.hpp"

namespace volt {
namespace {

void widen(ActivationRange& r, const Tensor& t) {
  if (t.dtype() != DType::Float) return;
  const float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (std::isfinite(p[i])) {
      r.lo = std::min(r.lo, p[i]);
      r.hi = std::max(r.hi, p[i]);
    }
}

}  // namespace

std::map<std::string, ActivationRange> calibrate(const Model& model,
                                                 const SessionOptions& options) {
  std::map<std::string, ActivationRange> ranges;
  std::vector<std::string> measured;
  Model m = model;  // tensors share their storage: no copy of the weights
  for (const std::string& name : quantizable_inputs(model.graph)) {
    if (model.graph.is_initializer(name)) continue;
    auto fed = std::find_if(options.calibration.begin(), options.calibration.end(),
                            [&](const auto& f) { return f.first == name; });
    if (fed != options.calibration.end()) {  // a graph input: its range is the batch's
      if (fed->second.is_tensor()) widen(ranges[name] = {0, 0}, fed->second.tensor());
      continue;
    }
    ValueInfo out;
    out.name = name;
    out.dtype = DType::Float;
    m.graph.outputs.push_back(out);
    measured.push_back(name);
  }
  SessionOptions fp32 = options;
  fp32.precision = "fp32";
  fp32.calibration.clear();
  Session::Impl session(std::move(m), fp32);
  const std::vector<Value> values = session.run(options.calibration, measured, RunOptions{});
  for (size_t i = 0; i < measured.size(); ++i)
    if (values[i].is_tensor()) widen(ranges[measured[i]] = {0, 0}, values[i].tensor());
  return ranges;
}

}  // namespace volt
