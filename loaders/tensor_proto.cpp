// TensorProto -> Tensor, for every ONNX dtype, raw or typed fields, inline or external data.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <limits>

#include "loaders/proto_convert.hpp"
#include "runtime/error.hpp"
#include "runtime/tensor_alloc.hpp"
#include "runtime/utf8.hpp"

namespace volt {
namespace fs = std::filesystem;

namespace {

// Copies a repeated typed field into the tensor, converting element by element.
template <class Dst, class Field>
void copy_field(Tensor& t, const Field& field) {
  Dst* out = static_cast<Dst*>(t.raw());
  for (int i = 0; i < field.size(); ++i) out[i] = static_cast<Dst>(field.Get(i));
}

template <class Field>
void copy_bits16(Tensor& t, const Field& field) {
  auto* out = static_cast<uint16_t*>(t.raw());
  for (int i = 0; i < field.size(); ++i) out[i] = static_cast<uint16_t>(field.Get(i));
}

int64_t typed_count(const onnx::TensorProto& p, DType dtype) {
  switch (dtype) {
    case DType::Float:
      return p.float_data_size();
    case DType::Complex64:
      return p.float_data_size() / 2;
    case DType::Double:
      return p.double_data_size();
    case DType::Complex128:
      return p.double_data_size() / 2;
    case DType::Int64:
      return p.int64_data_size();
    case DType::UInt32:
    case DType::UInt64:
      return p.uint64_data_size();
    case DType::String:
      return p.string_data_size();
    default:
      return p.int32_data_size();
  }
}

}  // namespace

Tensor tensor_from_proto(const onnx::TensorProto& p, ExternalData* external,
                         const std::string& what, std::optional<std::string_view> cut_raw_data) {
  VOLT_CHECK(dtype_is_valid(p.data_type()), InvalidModel,
             what + " has unknown data type " + std::to_string(p.data_type()));
  const DType dtype = static_cast<DType>(p.data_type());
  VOLT_CHECK(!p.has_segment(), NotImplemented, what + " uses segments, which volt does not read");
  Shape shape(p.dims().begin(), p.dims().end());
  for (int64_t d : shape)
    VOLT_CHECK(d >= 0, InvalidModel, what + " has a negative dimension in " + shape_str(shape));
  int64_t numel = 1;
  for (int64_t d : shape) {
    VOLT_CHECK(d == 0 || numel <= std::numeric_limits<int64_t>::max() / 16 / d, InvalidModel,
               what + " has shape " + shape_str(shape) + ", too many elements");
    numel *= d;
  }
  const size_t expect_bytes = static_cast<size_t>(numel) * dtype_size(dtype);

  if (p.data_location() == onnx::TensorProto::EXTERNAL) {
    VOLT_CHECK(external, InvalidModel, what + " has external data, which cannot be used here");
    VOLT_CHECK(dtype != DType::String, InvalidModel, what + ": string tensors cannot be external");
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto& kv : p.external_data()) {
      if (kv.key() == "location")
        location = kv.value();
      else if (kv.key() == "offset" || kv.key() == "length") {
        int64_t v = 0;
        try {
          size_t used = 0;
          v = std::stoll(kv.value(), &used);
          VOLT_CHECK(used == kv.value().size() && v >= 0, InvalidModel, "");
        } catch (const std::exception&) {
          fail(ErrorCode::InvalidModel,
               what + ": external data " + kv.key() + " '" + kv.value() + "' is not a number");
        }
        (kv.key() == "offset" ? offset : length) = v;
      }
    }
    VOLT_CHECK(!location.empty(), InvalidModel, what + ": external data has no location");
    if (length < 0) length = static_cast<int64_t>(expect_bytes);
    VOLT_CHECK(static_cast<size_t>(length) == expect_bytes, InvalidModel,
               what + ": external data length " + std::to_string(length) +
                   " does not match shape " + shape_str(shape) + " of " + dtype_name(dtype) + " (" +
                   std::to_string(expect_bytes) + " bytes)");
    return external->view(location, offset, length, dtype, shape, what);
  }

  if (cut_raw_data || p.has_raw_data()) {
    const std::string_view raw = cut_raw_data ? *cut_raw_data : std::string_view(p.raw_data());
    VOLT_CHECK(dtype != DType::String, InvalidModel, what + ": string tensors cannot use raw_data");
    VOLT_CHECK(raw.size() == expect_bytes, InvalidModel,
               what + " has " + std::to_string(raw.size()) + " bytes of data, shape " +
                   shape_str(shape) + " of " + dtype_name(dtype) + " needs " +
                   std::to_string(expect_bytes));
    // A weight lives as long as the session, or until the planner drops it for its packed copy:
    // outside the pool of per-run buffers (allocate_lasting_tensor).
    Tensor t = allocate_lasting_tensor(dtype, shape);
    if (t.nbytes()) std::memcpy(t.raw(), raw.data(), t.nbytes());
    return t;
  }

  const int64_t count = typed_count(p, dtype);
  VOLT_CHECK(count == numel, InvalidModel,
             what + " has " + std::to_string(count) + " values, shape " + shape_str(shape) +
                 " needs " + std::to_string(numel));
  Tensor t = dtype == DType::String ? allocate_tensor(dtype, shape, false)
                                    : allocate_lasting_tensor(dtype, shape);
  switch (dtype) {
    case DType::Float:
      copy_field<float>(t, p.float_data());
      break;
    case DType::Complex64:
      copy_field<float>(t, p.float_data());
      break;
    case DType::Double:
      copy_field<double>(t, p.double_data());
      break;
    case DType::Complex128:
      copy_field<double>(t, p.double_data());
      break;
    case DType::Int64:
      copy_field<int64_t>(t, p.int64_data());
      break;
    case DType::UInt32:
      copy_field<uint32_t>(t, p.uint64_data());
      break;
    case DType::UInt64:
      copy_field<uint64_t>(t, p.uint64_data());
      break;
    case DType::Int32:
      copy_field<int32_t>(t, p.int32_data());
      break;
    case DType::Int16:
      copy_field<int16_t>(t, p.int32_data());
      break;
    case DType::Int8:
      copy_field<int8_t>(t, p.int32_data());
      break;
    case DType::UInt16:
      copy_field<uint16_t>(t, p.int32_data());
      break;
    case DType::UInt8:
      copy_field<uint8_t>(t, p.int32_data());
      break;
    case DType::Bool: {
      auto* out = static_cast<bool*>(t.raw());
      for (int i = 0; i < p.int32_data_size(); ++i) out[i] = p.int32_data(i) != 0;
      break;
    }
    case DType::Float16:
    case DType::BFloat16:
      copy_bits16(t, p.int32_data());
      break;
    case DType::String: {
      auto* out = t.data<std::string>();
      for (int i = 0; i < p.string_data_size(); ++i) {
        VOLT_CHECK(is_valid_utf8(p.string_data(i)), InvalidModel,
                   what + ": string element " + std::to_string(i) + " is not valid UTF-8");
        out[i] = p.string_data(i);
      }
      break;
    }
    case DType::Undefined:
      break;
  }
  return t;
}

// --- external data -------------------------------------------------------------------------------
const ExternalData::Mapping& ExternalData::map_file(const std::string& location,
                                                    const std::string& what) {
  auto it = mappings_.find(location);
  if (it != mappings_.end()) return it->second;

  VOLT_CHECK(!base_dir_.empty(), InvalidModel,
             what + ": external data '" + location +
                 "' needs the model's folder; load the model from its path");
  const fs::path rel(location);
  VOLT_CHECK(!rel.is_absolute() && !rel.has_root_name() && !rel.has_root_directory(), InvalidModel,
             what + ": external data location '" + location +
                 "' is absolute; it must be relative to the model's folder");
  for (const auto& part : rel)
    VOLT_CHECK(part != "..", InvalidModel,
               what + ": external data location '" + location + "' leaves the model's folder");
  std::error_code ec;
  const fs::path base = fs::canonical(base_dir_, ec);
  VOLT_CHECK(!ec, Io, source_ + ": cannot resolve the model's folder '" + base_dir_ + "'");
  const fs::path full = fs::canonical(base / rel, ec);
  VOLT_CHECK(!ec, Io,
             what + ": external data file '" + location + "' not found next to " + source_);
  // Symlinks are resolved by canonical(): the real file must still be inside the folder.
  auto [bi, fi] = std::mismatch(base.begin(), base.end(), full.begin(), full.end());
  VOLT_CHECK(
      bi == base.end(), InvalidModel,
      what + ": external data location '" + location + "' resolves outside the model's folder");

  const int fd = ::open(full.c_str(), O_RDONLY | O_CLOEXEC);
  VOLT_CHECK(fd >= 0, Io, what + ": cannot open external data file '" + full.string() + "'");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(ErrorCode::Io, what + ": external data '" + full.string() + "' is not a regular file");
  }
  Mapping m;
  m.size = static_cast<size_t>(st.st_size);
  if (m.size > 0) {
    void* p = ::mmap(nullptr, m.size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      fail(ErrorCode::Io, what + ": cannot map external data file '" + full.string() + "'");
    }
    const size_t size = m.size;
    m.base = std::shared_ptr<void>(p, [size](void* q) { ::munmap(q, size); });
  }
  ::close(fd);
  return mappings_.emplace(location, std::move(m)).first->second;
}

Tensor ExternalData::view(const std::string& location, int64_t offset, int64_t length, DType dtype,
                          const Shape& shape, const std::string& what) {
  const Mapping& m = map_file(location, what);
  VOLT_CHECK(
      static_cast<uint64_t>(offset) <= m.size && static_cast<uint64_t>(length) <= m.size - offset,
      InvalidModel,
      what + ": external data [" + std::to_string(offset) + ", +" + std::to_string(length) +
          ") runs past the end of '" + location + "' (" + std::to_string(m.size) + " bytes)");
  if (length == 0) return allocate_tensor(dtype, shape, true);
  char* p = static_cast<char*>(m.base.get()) + offset;
  // Kernels assume naturally aligned elements; an odd offset gets a private copy.
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(dtype) != 0)
    return Tensor::copy_of(dtype, shape, p);
  // The mapping is read-only and private: kernels never write to weights.
  return Tensor::view(dtype, shape, p, m.base);
}

// --- types ---------------------------------------------------------------------------------------
namespace {
void shape_from_proto(const onnx::TypeProto_Tensor& t, ValueInfo& vi) {
  vi.dtype = dtype_is_valid(t.elem_type()) ? static_cast<DType>(t.elem_type()) : DType::Undefined;
  vi.has_shape = t.has_shape();
  if (!t.has_shape()) return;
  for (const auto& d : t.shape().dim()) {
    Dim dim;
    if (d.has_dim_value()) dim.value = d.dim_value();
    if (d.has_dim_param()) dim.symbol = d.dim_param();
    vi.shape.push_back(dim);
  }
}
}  // namespace

ValueInfo value_info_from_proto(const std::string& name, const onnx::TypeProto& type) {
  ValueInfo vi;
  vi.name = name;
  const onnx::TypeProto* inner = &type;
  if (type.has_optional_type()) {
    vi.kind = ValueInfo::Kind::Optional;
    inner = &type.optional_type().elem_type();
    if (inner->has_sequence_type()) inner = &inner->sequence_type().elem_type();
  } else if (type.has_sequence_type()) {
    vi.kind = ValueInfo::Kind::Sequence;
    inner = &type.sequence_type().elem_type();
  } else if (type.has_sparse_tensor_type()) {
    vi.kind = ValueInfo::Kind::SparseTensor;
    onnx::TypeProto_Tensor t;
    t.set_elem_type(type.sparse_tensor_type().elem_type());
    if (type.sparse_tensor_type().has_shape())
      *t.mutable_shape() = type.sparse_tensor_type().shape();
    shape_from_proto(t, vi);
    return vi;
  } else if (!type.has_tensor_type()) {
    vi.kind = ValueInfo::Kind::Other;
    return vi;
  }
  if (inner->has_tensor_type()) shape_from_proto(inner->tensor_type(), vi);
  return vi;
}

}  // namespace volt
