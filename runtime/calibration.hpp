// Static int8 quantization at load: the input ranges of the layers precision = int8 quantizes,
// measured on SessionOptions::calibration (one fp32 run of the model).
#pragma once
#include <map>
#include <string>

#include "runtime/graph.hpp"
#include "runtime/passes/passes.hpp"

namespace volt {

std::map<std::string, ActivationRange> calibrate(const Model& model, const SessionOptions& options);

}  // namespace volt
