// Backend test-data files: serialized TensorProto, SequenceProto or OptionalProto.
#include <fstream>

#include "loaders/loader.hpp"
#include "loaders/proto_convert.hpp"
#include "onnx/onnx-data.pb.h"
#include "runtime/error.hpp"

namespace volt {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  VOLT_CHECK(in, Io, path + ": cannot open");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

Value sequence_from_proto(const onnx::SequenceProto& s, const std::string& what) {
  VOLT_CHECK(s.elem_type() == onnx::SequenceProto::TENSOR ||
                 s.elem_type() == onnx::SequenceProto::UNDEFINED,
             NotImplemented, what + ": only sequences of tensors are supported");
  std::vector<Tensor> items;
  for (const auto& t : s.tensor_values()) items.push_back(tensor_from_proto(t, nullptr, what));
  DType dtype = items.empty() ? DType::Undefined : items[0].dtype();
  return Value::sequence(std::move(items), dtype);
}

}  // namespace

Tensor tensor_from_pb_bytes(const std::string& bytes, const std::string& what) {
  onnx::TensorProto p;
  VOLT_CHECK(p.ParseFromString(bytes), InvalidArgument, what + ": not a serialized TensorProto");
  return tensor_from_proto(p, nullptr, what);
}

Value read_value_pb(const std::string& path, ValueInfo::Kind kind) {
  const std::string bytes = read_file(path);
  if (kind == ValueInfo::Kind::Sequence) {
    onnx::SequenceProto s;
    VOLT_CHECK(s.ParseFromString(bytes), InvalidArgument,
               path + ": not a serialized SequenceProto");
    return sequence_from_proto(s, path);
  }
  if (kind == ValueInfo::Kind::Optional) {
    onnx::OptionalProto o;
    VOLT_CHECK(o.ParseFromString(bytes), InvalidArgument,
               path + ": not a serialized OptionalProto");
    if (o.has_tensor_value()) return tensor_from_proto(o.tensor_value(), nullptr, path);
    if (o.has_sequence_value()) return sequence_from_proto(o.sequence_value(), path);
    return Value::none();
  }
  return tensor_from_pb_bytes(bytes, path);
}

}  // namespace volt
