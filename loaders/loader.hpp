// The ONNX file formats, for the rest of volt. No protobuf type appears here.
#pragma once
#include <map>
#include <string>

#include "runtime/graph.hpp"
#include "volt/volt.hpp"

namespace volt {

// Loads a model file. External data is resolved relative to the model's folder and
// memory-mapped; locations that leave that folder are refused.
Model load_model(const std::string& path);

// Loads a model from bytes. `base_dir` is where external data is looked up; when empty, a
// model that has external data is refused.
Model load_model_from_bytes(const void* data, size_t size, const std::string& source = "<memory>",
                            const std::string& base_dir = "");

// Backend test-data files (input_0.pb, output_0.pb): a TensorProto, SequenceProto or
// OptionalProto, chosen by `kind`.
Value read_value_pb(const std::string& path, ValueInfo::Kind kind);

// Writes `original_bytes` (a ModelProto) with every initializer replaced by `initializers`; a
// tensor named like a Constant node's output or like an initializer of a subgraph replaces that
// one in place. When the main graph's weights hold more than `external_above` bytes in all, their
// data goes to OUT.data beside it (ONNX external data: protobuf cannot hold over 2 GiB). The
// model file is replaced atomically.
constexpr size_t kExportExternalAbove = size_t{3} << 29;  // 1.5 GiB
void write_model_with_weights(const std::string& original_bytes, const std::string& source,
                              const std::map<std::string, Tensor>& initializers,
                              const std::string& out_path,
                              size_t external_above = kExportExternalAbove);

// Reads a whole file.
std::string read_file_bytes(const std::string& path);

// The same as serialized bytes of a TensorProto (for tests and tools).
Tensor tensor_from_pb_bytes(const std::string& bytes, const std::string& what);

}  // namespace volt
