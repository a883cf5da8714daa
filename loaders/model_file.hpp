// Reads a model file into a ModelProto. The file is mapped; where its main graph has large
// initializers, protobuf parses the message without their bytes (initializer_bytes.hpp) and the
// loader copies each from the file's pages, once, letting each page go after. Otherwise (nothing
// large, or a message the cut does not follow) protobuf reads the file through a small buffer
// (FileInputStream), so the file's bytes are never resident beside the parsed proto.
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "loaders/initializer_bytes.hpp"
#include "onnx/onnx_pb.h"

namespace volt {

// The cut initializers' bytes and the mapping that holds them (empty where nothing was cut).
struct ModelFileBytes {
  std::shared_ptr<void> mapping;
  CutSource cut;
};

// Io errors for a missing or unreadable file; InvalidModel for an empty one, one over protobuf's
// 2 GiB limit, or bytes that do not parse.
ModelFileBytes parse_model_file(const std::string& path, onnx::ModelProto& proto);

// The whole pages of the file's mapping inside `bytes`, once copied: dropped from the process
// (the page cache keeps them), so that the file's weights are not resident beside their copies
// while the model loads.
void let_go_of_file_pages(std::string_view bytes);

}  // namespace volt
