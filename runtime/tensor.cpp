// Tensor, Value and dtype helpers of the public API.
#include <cmath>
#include <cstdlib>
#include <limits>
#include <new>
#include <sstream>

#include "runtime/buffer_pool.hpp"
#include "runtime/device.hpp"
#include "runtime/error.hpp"
#include "runtime/run_control.hpp"
#include "runtime/tensor_alloc.hpp"
#include "volt/volt.hpp"

namespace volt {

const char* version() {
  return "0.1.0";
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Undefined:
      return "undefined";
    case DType::Float:
      return "float32";
    case DType::UInt8:
      return "uint8";
    case DType::Int8:
      return "int8";
    case DType::UInt16:
      return "uint16";
    case DType::Int16:
      return "int16";
    case DType::Int32:
      return "int32";
    case DType::Int64:
      return "int64";
    case DType::String:
      return "string";
    case DType::Bool:
      return "bool";
    case DType::Float16:
      return "float16";
    case DType::Double:
      return "float64";
    case DType::UInt32:
      return "uint32";
    case DType::UInt64:
      return "uint64";
    case DType::Complex64:
      return "complex64";
    case DType::Complex128:
      return "complex128";
    case DType::BFloat16:
      return "bfloat16";
  }
  return "invalid";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Undefined:
      return 0;
    case DType::Bool:
    case DType::UInt8:
    case DType::Int8:
      return 1;
    case DType::UInt16:
    case DType::Int16:
    case DType::Float16:
    case DType::BFloat16:
      return 2;
    case DType::Float:
    case DType::Int32:
    case DType::UInt32:
      return 4;
    case DType::Int64:
    case DType::UInt64:
    case DType::Double:
    case DType::Complex64:
      return 8;
    case DType::Complex128:
      return 16;
    case DType::String:
      return sizeof(std::string);
  }
  return 0;
}

bool dtype_is_valid(int32_t n) {
  return n >= 1 && n <= 16;
}

// --- half precision ----------------------------------------------------------------------------
Float16::Float16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    bits = static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
    return;
  }
  if (abs >= 0x477ff000u) {  // rounds to above the largest half: inf
    bits = static_cast<uint16_t>(sign | 0x7c00u);
    return;
  }
  if (abs < 0x38800000u) {  // subnormal half (or zero): scale into the integer range and round
    float a;
    uint32_t ai = abs;
    std::memcpy(&a, &ai, 4);
    const float scaled = a * 16777216.0f;  // 2^24: one unit is the smallest half subnormal
    bits = static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
    return;
  }
  uint32_t mant = abs & 0x7fffffu;
  uint32_t exp = (abs >> 23) - 112;  // rebias 127 -> 15
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // round to nearest even
  bits = static_cast<uint16_t>(sign | h);
}

Float16::operator float() const {
  const uint32_t sign = (bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1fu;
  const uint32_t mant = bits & 0x3ffu;
  uint32_t x;
  if (exp == 0x1f) {
    x = sign | 0x7f800000u | (mant << 13);
  } else if (exp == 0) {
    const float v = static_cast<float>(mant) / 16777216.0f;
    return sign ? -v : v;
  } else {
    x = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

BFloat16::BFloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) {
    bits = static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
    return;
  }
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  bits = static_cast<uint16_t>((x + rounding) >> 16);
}

BFloat16::operator float() const {
  const uint32_t x = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// --- shapes --------------------------------------------------------------------------------------
std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      throw Error(ErrorCode::InvalidArgument, "negative dimension in shape " + shape_str(shape));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      throw Error(ErrorCode::InvalidArgument,
                  "shape " + shape_str(shape) + " has too many elements");
    n *= d;
  }
  return n;
}

// --- allocation ----------------------------------------------------------------------------------
namespace {
constexpr size_t kAlignment = 64;  // one cache line; what AVX-512 loads like

// `lasting`: memory for the life of a session (a model's weights), outside the buffer pool.
std::shared_ptr<void> allocate_bytes(size_t bytes, bool zero, bool lasting = false) {
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  // Inside a run, the bytes count against its memory limit until the tensor is freed.
  std::shared_ptr<MemoryBudget> budget = reserve_in_current_run(rounded, "a tensor");
  size_t size = rounded == 0 ? kAlignment : rounded;
  void* p = lasting ? lasting_allocate(size) : pool_allocate(size, &size);
  if (!p) {
    if (budget) budget->release(rounded);
    throw Error(ErrorCode::OutOfMemory,
                "out of memory allocating " + std::to_string(bytes) + " bytes");
  }
  if (zero) std::memset(p, 0, bytes);
  auto give_back = [size, lasting](void* q) {
    if (lasting)
      lasting_free(q, size);
    else
      pool_free(q, size);
  };
  if (!budget) return std::shared_ptr<void>(p, give_back);
  return std::shared_ptr<void>(p, [budget, rounded, give_back](void* q) {
    give_back(q);
    budget->release(rounded);
  });
}

std::shared_ptr<void> allocate_strings(int64_t n) {
  const size_t bytes = checked_bytes(DType::String, n);
  std::shared_ptr<MemoryBudget> budget = reserve_in_current_run(bytes, "a string tensor");
  auto* p = new (std::nothrow) std::string[static_cast<size_t>(n == 0 ? 1 : n)];
  if (!p) {
    if (budget) budget->release(bytes);
    throw Error(ErrorCode::OutOfMemory, "out of memory allocating a string tensor");
  }
  return std::shared_ptr<void>(p, [budget, bytes](void* q) {
    delete[] static_cast<std::string*>(q);
    if (budget) budget->release(bytes);
  });
}

}  // namespace

size_t checked_bytes(DType dtype, int64_t numel) {
  const size_t es = dtype_size(dtype);
  if (numel > 0 && static_cast<uint64_t>(numel) > std::numeric_limits<size_t>::max() / 2 / es)
    throw Error(ErrorCode::OutOfMemory,
                "tensor of " + std::to_string(numel) + " elements is too large");
  return static_cast<size_t>(numel) * es;
}

Tensor allocate_tensor(DType dtype, Shape shape, bool zero) {
  if (dtype == DType::Undefined || !dtype_is_valid(static_cast<int32_t>(dtype)))
    throw Error(ErrorCode::InvalidArgument, "cannot allocate a tensor of undefined dtype");
  const int64_t n = numel_of(shape);
  if (dtype == DType::String) {
    auto owner = allocate_strings(n);
    return Tensor::view(dtype, std::move(shape), owner.get(), owner);
  }
  auto owner = allocate_bytes(checked_bytes(dtype, n), zero);
  return Tensor::view(dtype, std::move(shape), owner.get(), owner);
}

Tensor allocate_lasting_tensor(DType dtype, Shape shape) {
  VOLT_CHECK(dtype != DType::String && dtype != DType::Undefined &&
                 dtype_is_valid(static_cast<int32_t>(dtype)),
             InvalidArgument, "a lasting tensor holds numbers");
  auto owner = allocate_bytes(checked_bytes(dtype, numel_of(shape)), false, true);
  return Tensor::view(dtype, std::move(shape), owner.get(), owner);
}

// --- Tensor --------------------------------------------------------------------------------------
Tensor Tensor::empty(DType dtype, Shape shape) {
  return allocate_tensor(dtype, std::move(shape), true);
}

Tensor Tensor::copy_of(DType dtype, Shape shape, const void* data) {
  Tensor t = allocate_tensor(dtype, std::move(shape), false);
  if (dtype == DType::String) {
    const auto* src = static_cast<const std::string*>(data);
    for (int64_t i = 0; i < t.numel(); ++i) t.data<std::string>()[i] = src[i];
  } else if (t.nbytes()) {
    std::memcpy(t.raw(), data, t.nbytes());
  }
  return t;
}

Tensor Tensor::view(DType dtype, Shape shape, void* data, std::shared_ptr<void> owner,
                    Device device) {
  Tensor t;
  t.numel_ = numel_of(shape);
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.data_ = data;
  t.owner_ = std::move(owner);
  t.device_ = device;
  return t;
}

Tensor Tensor::empty_on(Device device, DType dtype, Shape shape) {
  if (device.is_cpu()) return allocate_tensor(dtype, std::move(shape), false);
  return allocate_on_device(device, dtype, std::move(shape), nullptr);
}

Tensor allocate_on_device(Device device, DType dtype, Shape shape, void* stream) {
  VOLT_CHECK(dtype != DType::String && dtype != DType::Undefined &&
                 dtype_is_valid(static_cast<int32_t>(dtype)),
             InvalidArgument,
             std::string("cannot allocate a ") + dtype_name(dtype) + " tensor on " + device.str());
  DeviceBackend& backend = require_device(device);
  const size_t bytes = checked_bytes(dtype, numel_of(shape));
  void* p = bytes ? backend.allocate(device.index, bytes, stream) : nullptr;
  std::shared_ptr<void> owner(p, [&backend, device, bytes, stream](void* q) {
    if (q) backend.deallocate(device.index, q, bytes, stream);
  });
  return Tensor::view(dtype, std::move(shape), p, std::move(owner), device);
}

Tensor Tensor::reshaped(Shape shape) const {
  if (numel_of(shape) != numel_)
    throw Error(ErrorCode::InvalidArgument,
                "cannot reshape " + shape_str(shape_) + " to " + shape_str(shape));
  return view(dtype_, std::move(shape), data_, owner_, device_);
}

Tensor Tensor::clone() const {
  if (!defined()) return {};
  if (device_.is_cpu()) return copy_of(dtype_, shape_, data_);
  Tensor t = empty_on(device_, dtype_, shape_);
  if (nbytes())
    require_device(device_).copy_on_device(device_.index, t.raw(), data_, nbytes(), nullptr);
  return t;
}

Tensor Tensor::to(Device device) const {
  if (!defined() || device == device_) return *this;
  VOLT_CHECK(device.is_cpu() || device_.is_cpu(), InvalidArgument,
             "copies between two devices (" + device_.str() + " to " + device.str() +
                 ") go through the host");
  Tensor t = empty_on(device, dtype_, shape_);
  if (!nbytes()) return t;
  if (device.is_cpu())
    require_device(device_).copy_to_host(device_.index, t.raw(), data_, nbytes(), nullptr);
  else
    require_device(device).copy_to_device(device.index, t.raw(), data_, nbytes(), nullptr);
  return t;
}

void Tensor::check_dtype(DType requested) const {
  if (requested != dtype_)
    throw Error(ErrorCode::InvalidArgument, std::string("tensor holds ") + dtype_name(dtype_) +
                                                ", accessed as " + dtype_name(requested));
}

void Tensor::check_count(size_t count, const Shape& shape) {
  if (static_cast<int64_t>(count) != numel_of(shape))
    throw Error(ErrorCode::InvalidArgument,
                std::to_string(count) + " values given for shape " + shape_str(shape));
}

// --- Value ---------------------------------------------------------------------------------------
// A Value has room for a tensor, a CSR matrix and a sequence, and uses one: copying or moving
// every member (the compiler's way) was 3% of a Loop body's iterations, which move a dozen
// values each. The members a kind does not use stay empty, so only the used ones move.
Value::Value(const Value& other) : kind_(other.kind_), seq_dtype_(other.seq_dtype_) {
  if (kind_ == Kind::Tensor) tensor_ = other.tensor_;
  if (kind_ == Kind::Csr) csr_ = other.csr_;
  if (kind_ == Kind::Sequence) items_ = other.items_;
}

Value::Value(Value&& other) noexcept : kind_(other.kind_), seq_dtype_(other.seq_dtype_) {
  if (kind_ == Kind::Tensor) tensor_ = std::move(other.tensor_);
  if (kind_ == Kind::Csr) csr_ = std::move(other.csr_);
  if (kind_ == Kind::Sequence) items_ = std::move(other.items_);
}

Value& Value::operator=(const Value& other) {
  if (this != &other) *this = Value(other);
  return *this;
}

Value& Value::operator=(Value&& other) noexcept {
  if (this == &other) return *this;
  // What this one held goes (unless the other's kind overwrites it next).
  if (kind_ == Kind::Tensor && other.kind_ != Kind::Tensor) tensor_ = Tensor();
  if (kind_ == Kind::Csr && other.kind_ != Kind::Csr) csr_ = CsrTensor();
  if (kind_ == Kind::Sequence && other.kind_ != Kind::Sequence) std::vector<Tensor>().swap(items_);
  if (other.kind_ == Kind::Tensor) tensor_ = std::move(other.tensor_);
  if (other.kind_ == Kind::Csr) csr_ = std::move(other.csr_);
  if (other.kind_ == Kind::Sequence) items_ = std::move(other.items_);
  kind_ = other.kind_;
  seq_dtype_ = other.seq_dtype_;
  return *this;
}

Value Value::sequence(std::vector<Tensor> items, DType elem_type) {
  Value v;
  v.kind_ = Kind::Sequence;
  if (elem_type == DType::Undefined && !items.empty()) elem_type = items[0].dtype();
  for (const Tensor& t : items)
    if (t.dtype() != elem_type)
      throw Error(ErrorCode::InvalidArgument, "sequence items must share one dtype");
  v.items_ = std::move(items);
  v.seq_dtype_ = elem_type;
  return v;
}

const Tensor& Value::tensor() const {
  if (kind_ != Kind::Tensor) throw Error(ErrorCode::InvalidArgument, "value is not a tensor");
  return tensor_;
}
Tensor& Value::tensor() {
  if (kind_ != Kind::Tensor) throw Error(ErrorCode::InvalidArgument, "value is not a tensor");
  return tensor_;
}
const CsrTensor& Value::csr() const {
  if (kind_ != Kind::Csr) throw Error(ErrorCode::InvalidArgument, "value is not a CSR tensor");
  return csr_;
}
const std::vector<Tensor>& Value::sequence_items() const {
  if (kind_ != Kind::Sequence) throw Error(ErrorCode::InvalidArgument, "value is not a sequence");
  return items_;
}

std::string ValueInfo::describe() const {
  std::string out;
  if (kind == Kind::Sequence) out = "seq(";
  if (kind == Kind::Optional) out = "optional(";
  if (kind == Kind::SparseTensor) out = "sparse(";
  out += dtype_name(dtype);
  if (has_shape) {
    out += "[";
    for (size_t i = 0; i < shape.size(); ++i) {
      if (i) out += ",";
      out += shape[i].is_fixed() ? std::to_string(shape[i].value)
                                 : (shape[i].symbol.empty() ? "?" : shape[i].symbol);
    }
    out += "]";
  }
  if (kind != Kind::Tensor && kind != Kind::Other) out += ")";
  return out;
}

}  // namespace volt
