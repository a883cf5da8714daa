// Reads a model file into a ModelProto through a small buffer (protobuf's FileInputStream), so
// the file's bytes are never resident beside the parsed proto: for a model of big weights, peak
// memory while loading is about the proto, not the proto plus the file.
#pragma once
#include <string>

#include "onnx/onnx_pb.h"

namespace volt {

// Io errors for a missing or unreadable file; InvalidModel for an empty one, one over protobuf's
// 2 GiB limit, or bytes that do not parse.
void parse_model_file(const std::string& path, onnx::ModelProto& proto);

}  // namespace volt
