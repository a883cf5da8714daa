#include "numpy_values.hpp"

#include <array>
#include <bit>
#include <cstring>

namespace volt::python {

namespace {

constexpr int kNumpyAligned = 0x0100;  // NPY_ARRAY_ALIGNED
constexpr size_t kDTypeCount = 17;     // DType values 0..16

// numpy dtypes by DType number (nullptr where numpy has none: String, BFloat16, Undefined).
// Created once and never freed: module-level Python objects must not be destroyed after the
// interpreter is.
std::array<py::dtype*, kDTypeCount> g_dtypes{};
py::object* g_numpy = nullptr;

py::object& numpy() {
  return *g_numpy;
}

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::InvalidArgument, message);
}

DType dtype_from_numpy(const py::dtype& dt, const std::string& name) {
  const char kind = dt.kind();
  const auto size = dt.itemsize();
  switch (kind) {
    case 'b':
      return DType::Bool;
    case 'i':
      if (size == 1) return DType::Int8;
      if (size == 2) return DType::Int16;
      if (size == 4) return DType::Int32;
      if (size == 8) return DType::Int64;
      break;
    case 'u':
      if (size == 1) return DType::UInt8;
      if (size == 2) return DType::UInt16;
      if (size == 4) return DType::UInt32;
      if (size == 8) return DType::UInt64;
      break;
    case 'f':
      if (size == 2) return DType::Float16;
      if (size == 4) return DType::Float;
      if (size == 8) return DType::Double;
      break;
    case 'c':
      if (size == 8) return DType::Complex64;
      if (size == 16) return DType::Complex128;
      break;
    case 'U':
    case 'S':
    case 'O':
      return DType::String;
    default:
      break;
  }
  invalid("input '" + name + "': numpy dtype " +
          py::str(static_cast<py::handle>(dt)).cast<std::string>() + " has no ONNX element type");
}

void release_reference(void* object) {
  py::gil_scoped_acquire gil;
  Py_DECREF(static_cast<PyObject*>(object));
}

// A reference to `obj` that a volt tensor can hold (released with the GIL taken).
std::shared_ptr<void> hold(const py::object& obj) {
  return std::shared_ptr<void>(py::object(obj).release().ptr(), release_reference);
}

Tensor string_tensor(const py::array& arr, const std::string& name) {
  Shape shape(arr.shape(), arr.shape() + arr.ndim());
  Tensor t = Tensor::empty(DType::String, shape);
  const py::list items = arr.attr("ravel")().attr("tolist")();
  std::string* out = t.data<std::string>();
  size_t i = 0;
  for (const py::handle item : items) {
    if (py::isinstance<py::str>(item))
      out[i++] = item.cast<std::string>();
    else if (py::isinstance<py::bytes>(item))
      out[i++] = item.cast<std::string>();
    else
      invalid("input '" + name + "': element " + std::to_string(i) + " of a string tensor is " +
              py::str(py::type::handle_of(item)).cast<std::string>() + ", not str");
  }
  return t;
}

Tensor tensor_from_array(py::array arr, const std::string& name) {
  const DType dtype = dtype_from_numpy(arr.dtype(), name);
  if (dtype == DType::String) return string_tensor(arr, name);
  // '=' native, '|' not applicable, '<' or '>' explicit: only the other machine's order is foreign.
  const char foreign = std::endian::native == std::endian::little ? '>' : '<';
  const bool native_order = arr.dtype().byteorder() != foreign;
  if (!(arr.flags() & py::array::c_style) || !(arr.flags() & kNumpyAligned) || !native_order)
    // A layout copy (same values, same type) so that the runtime can read it row-major.
    arr = numpy().attr("ascontiguousarray")(arr, arr.dtype().attr("newbyteorder")("="));
  Shape shape(arr.shape(), arr.shape() + arr.ndim());
  return Tensor::view(dtype, std::move(shape), const_cast<void*>(arr.data()), hold(arr));
}

// What numpy calls `expected`'s element type, or None.
py::object numpy_dtype_of(DType t) {
  if (t == DType::String) return py::dtype("O");
  const auto i = static_cast<size_t>(t);
  return i < kDTypeCount && g_dtypes[i] ? py::object(*g_dtypes[i]) : py::none();
}

// A Python list or scalar as an array: it takes the declared element type when its own natural
// one is of the same kind (floats for a float input, integers for an integer or float input,
// bools for bool, str for string); otherwise it keeps its own and the session reports the
// mismatch.
py::array array_from_python(py::handle obj, DType declared, const std::string& name) {
  py::array natural;
  try {
    natural = numpy().attr("asarray")(obj);
  } catch (py::error_already_set& e) {  // a ragged list, an object numpy cannot read
    invalid("input '" + name + "' cannot be read as an array: " + e.what());
  }
  const py::object want = numpy_dtype_of(declared);
  if (want.is_none()) return natural;
  const char have = natural.dtype().kind(), need = want.cast<py::dtype>().kind();
  const bool same_kind =
      have == need || (have == 'i' && (need == 'u' || need == 'f')) || (have == 'U' && need == 'O');
  return same_kind ? py::array(numpy().attr("asarray")(obj, want)) : natural;
}

Tensor index_tensor(py::handle obj) {
  py::array a =
      numpy().attr("ascontiguousarray")(obj, *g_dtypes[static_cast<size_t>(DType::Int64)]);
  return Tensor::copy_of(DType::Int64, Shape(a.shape(), a.shape() + a.ndim()), a.data());
}

CsrTensor csr_from_scipy(py::handle obj, const std::string& name) {
  py::object m = obj.attr("format").cast<std::string>() == "csr"
                     ? py::reinterpret_borrow<py::object>(obj)
                     : obj.attr("tocsr")();
  const py::tuple shape = m.attr("shape");
  return csr_from_arrays(m.attr("data"), m.attr("indices"), m.attr("indptr"),
                         shape[0].cast<int64_t>(), shape[1].cast<int64_t>(), name);
}

py::array array_of(const Tensor& t) {
  const auto i = static_cast<size_t>(t.dtype());
  const std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  if (t.dtype() == DType::String) {
    py::list items;
    const std::string* s = t.data<std::string>();
    for (int64_t k = 0; k < t.numel(); ++k) items.append(py::str(s[k]));
    py::tuple dims(shape.size());
    for (size_t d = 0; d < shape.size(); ++d) dims[d] = py::int_(shape[d]);
    return numpy().attr("array")(items, py::dtype("O")).attr("reshape")(dims);
  }
  if (t.dtype() == DType::BFloat16) {  // numpy has no bfloat16: widened exactly to float32
    py::array_t<float> out(shape);
    const BFloat16* in = static_cast<const BFloat16*>(t.raw());
    float* o = out.mutable_data();
    for (int64_t k = 0; k < t.numel(); ++k) o[k] = static_cast<float>(in[k]);
    return out;
  }
  if (i >= kDTypeCount || !g_dtypes[i])
    throw Error(ErrorCode::NotImplemented,
                std::string("an output of type ") + dtype_name(t.dtype()) + " has no numpy form");
  std::vector<py::ssize_t> strides(shape.size());
  py::ssize_t stride = static_cast<py::ssize_t>(dtype_size(t.dtype()));
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= std::max<py::ssize_t>(shape[d], 1);
  }
  // The array's base owns a handle to the tensor: its buffer lives as long as the array does.
  auto* keep = new Tensor(t);
  py::capsule base(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(*g_dtypes[i], shape, strides, t.raw(), base);
}

}  // namespace

CsrTensor csr_from_arrays(py::handle values, py::handle col_indices, py::handle row_offsets,
                          int64_t rows, int64_t cols, const std::string& name) {
  // The index arrays become int64 (a widening of the int32 indices scipy builds).
  return CsrTensor::create(rows, cols, index_tensor(row_offsets), index_tensor(col_indices),
                           tensor_from_array(numpy().attr("asarray")(values), name));
}

void init_dtypes() {
  g_numpy = new py::object(py::module_::import("numpy"));
  const std::pair<DType, const char*> names[] = {
      {DType::Float, "float32"},       {DType::UInt8, "uint8"},
      {DType::Int8, "int8"},           {DType::UInt16, "uint16"},
      {DType::Int16, "int16"},         {DType::Int32, "int32"},
      {DType::Int64, "int64"},         {DType::Bool, "bool"},
      {DType::Float16, "float16"},     {DType::Double, "float64"},
      {DType::UInt32, "uint32"},       {DType::UInt64, "uint64"},
      {DType::Complex64, "complex64"}, {DType::Complex128, "complex128"}};
  for (const auto& [t, n] : names) g_dtypes[static_cast<size_t>(t)] = new py::dtype(n);
}

Value to_value(py::handle obj, const ValueInfo* expected, const std::string& name) {
  if (obj.is_none()) return Value::none();
  if (py::isinstance<py::array>(obj))
    return tensor_from_array(py::reinterpret_borrow<py::array>(obj), name);
  if (py::isinstance<CsrTensor>(obj)) return obj.cast<CsrTensor>();
  if (py::hasattr(obj, "tocsr") && py::hasattr(obj, "nnz")) return csr_from_scipy(obj, name);
  const DType declared = expected ? expected->dtype : DType::Undefined;
  const bool sequence = expected && (expected->kind == ValueInfo::Kind::Sequence);
  if (sequence && (py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj))) {
    std::vector<Tensor> items;
    for (const py::handle item : obj) {
      const Value v = to_value(item, nullptr, name);
      if (!v.is_tensor()) invalid("input '" + name + "': a sequence holds tensors only");
      items.push_back(v.tensor());
    }
    return Value::sequence(std::move(items), declared);
  }
  return tensor_from_array(array_from_python(obj, declared, name), name);
}

NamedValues to_named_values(const py::dict& feed, const std::vector<ValueInfo>& declared) {
  NamedValues out;
  out.reserve(feed.size());
  for (const auto& [key, obj] : feed) {
    if (!py::isinstance<py::str>(key))
      invalid("input names must be str, got " +
              py::str(py::type::handle_of(key)).cast<std::string>());
    std::string name = key.cast<std::string>();
    const ValueInfo* info = nullptr;
    for (const ValueInfo& v : declared)
      if (v.name == name) info = &v;
    Value v = to_value(obj, info, name);
    out.emplace_back(std::move(name), std::move(v));
  }
  return out;
}

py::object to_python(Value v) {
  switch (v.kind()) {
    case Value::Kind::None:
      return py::none();
    case Value::Kind::Csr:
      return py::cast(v.csr());
    case Value::Kind::Sequence: {
      py::list items;
      for (const Tensor& t : v.sequence_items())
        items.append(array_of(t.device().is_cpu() ? t : t.to(Device{})));
      return items;
    }
    case Value::Kind::Tensor:
      break;
  }
  const Tensor& t = v.tensor();
  return array_of(t.device().is_cpu() ? t : t.to(Device{}));
}

std::vector<FedRange> fed_ranges(const NamedValues& values) {
  std::vector<FedRange> out;
  for (const auto& [_, v] : values)
    if (v.is_tensor() && v.tensor().nbytes() > 0) {
      const char* p = static_cast<const char*>(v.tensor().raw());
      out.push_back({p, p + v.tensor().nbytes()});
    }
  return out;
}

std::string onnx_type_string(const ValueInfo& info) {
  static const char* const names[kDTypeCount] = {
      "undefined", "float",  "uint8",     "int8",       "uint16",  "int16",
      "int32",     "int64",  "string",    "bool",       "float16", "double",
      "uint32",    "uint64", "complex64", "complex128", "bfloat16"};
  const auto i = static_cast<size_t>(info.dtype);
  const std::string elem = i < kDTypeCount ? names[i] : "undefined";
  switch (info.kind) {
    case ValueInfo::Kind::Tensor:
      return "tensor(" + elem + ")";
    case ValueInfo::Kind::Sequence:
      return "seq(tensor(" + elem + "))";
    case ValueInfo::Kind::Optional:
      return "optional(tensor(" + elem + "))";
    case ValueInfo::Kind::SparseTensor:
      return "sparse_tensor(" + elem + ")";
    case ValueInfo::Kind::Other:
      break;
  }
  return "unknown";
}

}  // namespace volt::python
