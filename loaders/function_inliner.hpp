// Model-local functions (ModelProto.functions) are inlined into the graph before conversion,
// so the rest of volt only ever sees plain ops.
#pragma once
#include <string>

#include "onnx/onnx_pb.h"

namespace volt {
// Replaces every call of a model-local function (in the main graph and in subgraphs) with the
// function's body, values renamed apart. Recursive functions are an InvalidModel error.
void inline_local_functions(onnx::ModelProto& model, const std::string& source);
}  // namespace volt
