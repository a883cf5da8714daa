// The ONNX file formats, for the rest of volt. No protobuf type appears here.
#pragma once
#include <functional>
#include <map>
#include <set>
#include <string>

#include "runtime/graph.hpp"
#include "volt/volt.hpp"

namespace volt {

// What the parsed file tells before its checks and conversion, which take most of a small
// model's load (the ONNX schema registry the checker reads is built on its first use: 15-20 ms):
// enough for a caller to start preparing work the model will need while the load goes on.
struct ParsedModel {
  std::set<std::string> op_types;  // of the ONNX domain, in every graph (subgraphs too)
  // Whether an input of the main graph has a dimension past the first that is not a fixed number
  // (a sentence's length, an image's width): runs will likely come in several shapes.
  bool input_dims_vary = false;
  // Elements of the main graph's initializers, as their dimensions say (saturating): how large
  // the model is, before its weights are read.
  int64_t weight_elements = 0;
};
using OnParsed = std::function<void(const ParsedModel&)>;

// Loads a model file. External data is resolved relative to the model's folder and
// memory-mapped; locations that leave that folder are refused. `on_parsed`, where given, is
// called once the file parses, before anything else is checked.
Model load_model(const std::string& path, const OnParsed& on_parsed = {});

// Loads a model from bytes. `base_dir` is where external data is looked up; when empty, a
// model that has external data is refused.
Model load_model_from_bytes(const void* data, size_t size, const std::string& source = "<memory>",
                            const std::string& base_dir = "", const OnParsed& on_parsed = {});

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
