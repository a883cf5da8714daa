// Protobuf <-> volt conversions, private to loaders/.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "onnx/onnx_pb.h"
#include "volt/volt.hpp"

namespace volt {

// Where a TensorProto's external data may be read from. Mappings are shared between tensors
// of one file so each file is mapped once.
class ExternalData {
 public:
  explicit ExternalData(std::string base_dir, std::string source)
      : base_dir_(std::move(base_dir)), source_(std::move(source)) {}
  // A view of [offset, offset+length) of `location`, checked to stay inside base_dir.
  Tensor view(const std::string& location, int64_t offset, int64_t length, DType dtype,
              const Shape& shape, const std::string& tensor_name);

 private:
  struct Mapping {
    std::shared_ptr<void> base;
    size_t size = 0;
  };
  const Mapping& map_file(const std::string& location, const std::string& tensor_name);

  std::string base_dir_;
  std::string source_;
  std::map<std::string, Mapping> mappings_;
};

// Converts a TensorProto. `what` names the tensor in messages ("initializer 'W' in model.onnx").
// With `cut_raw_data`, the tensor's raw_data is those bytes (initializer_bytes.hpp cut them from
// the message protobuf parsed).
Tensor tensor_from_proto(const onnx::TensorProto& proto, ExternalData* external,
                         const std::string& what,
                         std::optional<std::string_view> cut_raw_data = std::nullopt);

ValueInfo value_info_from_proto(const std::string& name, const onnx::TypeProto& type);

}  // namespace volt
