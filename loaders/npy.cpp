#include "loaders/npy.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <string_view>

#include <fstream>
#include <map>

#include "runtime/error.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {
namespace {

const std::map<std::string, DType>& descr_types() {
  static const std::map<std::string, DType> m = {
      {"f4", DType::Float},     {"f8", DType::Double},     {"f2", DType::Float16},
      {"i1", DType::Int8},      {"i2", DType::Int16},      {"i4", DType::Int32},
      {"i8", DType::Int64},     {"u1", DType::UInt8},      {"u2", DType::UInt16},
      {"u4", DType::UInt32},    {"u8", DType::UInt64},     {"b1", DType::Bool},
      {"c8", DType::Complex64}, {"c16", DType::Complex128}};
  return m;
}

// The value that follows 'key': in the header dict, up to the next delimiter.
std::string dict_value(const std::string& header, const std::string& key, const std::string& what) {
  const size_t k = header.find("'" + key + "'");
  VOLT_CHECK(k != std::string::npos, InvalidArgument, what + ": .npy header has no '" + key + "'");
  size_t p = header.find(':', k);
  VOLT_CHECK(p != std::string::npos, InvalidArgument, what + ": bad .npy header");
  ++p;
  while (p < header.size() && header[p] == ' ') ++p;
  if (p < header.size() && header[p] == '(') return header.substr(p, header.find(')', p) - p + 1);
  if (p < header.size() && header[p] == '\'')
    return header.substr(p + 1, header.find('\'', p + 1) - p - 1);
  return header.substr(p, header.find_first_of(",}", p) - p);
}

// What a .npy header says: the dtype, the shape, and where the data starts.
struct NpyLayout {
  DType dtype;
  Shape shape;
  size_t data_offset;
};

NpyLayout parse_header(std::string_view bytes, const std::string& what) {
  VOLT_CHECK(bytes.size() >= 10 && bytes.compare(0, 6, "\x93NUMPY") == 0, InvalidArgument,
             what + ": not a .npy file");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len, offset;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    offset = 10;
  } else {
    VOLT_CHECK(bytes.size() >= 12 && (major == 2 || major == 3), InvalidArgument,
               what + ": unsupported .npy version");
    header_len = 0;
    for (int i = 0; i < 4; ++i)
      header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    offset = 12;
  }
  VOLT_CHECK(offset + header_len <= bytes.size(), InvalidArgument,
             what + ": truncated .npy header");
  const std::string header(bytes.substr(offset, header_len));
  const std::string descr = dict_value(header, "descr", what);
  VOLT_CHECK(dict_value(header, "fortran_order", what).find("False") != std::string::npos,
             NotImplemented, what + ": Fortran-order .npy arrays are not supported");
  VOLT_CHECK(!descr.empty() && descr[0] != '>', NotImplemented,
             what + ": big-endian .npy arrays are not supported");
  const std::string code =
      descr[0] == '<' || descr[0] == '|' || descr[0] == '=' ? descr.substr(1) : descr;
  auto it = descr_types().find(code);
  VOLT_CHECK(it != descr_types().end(), NotImplemented,
             what + ": .npy dtype '" + descr + "' is not supported");
  const std::string shape_text = dict_value(header, "shape", what);
  Shape shape;
  for (size_t p = 0; p < shape_text.size();) {
    if (isdigit(static_cast<unsigned char>(shape_text[p]))) {
      int64_t d = 0;
      for (; p < shape_text.size() && isdigit(static_cast<unsigned char>(shape_text[p])); ++p) {
        VOLT_CHECK(d <= (std::numeric_limits<int64_t>::max() - 9) / 10, InvalidArgument,
                   what + ": .npy shape " + shape_text + " has a dimension past 2^63");
        d = d * 10 + (shape_text[p] - '0');
      }
      shape.push_back(d);
    } else {
      ++p;
    }
  }
  const int64_t n = numel_of(shape);
  const size_t need = checked_bytes(it->second, n);
  VOLT_CHECK(bytes.size() - offset - header_len == need, InvalidArgument,
             what + ": .npy data is " + std::to_string(bytes.size() - offset - header_len) +
                 " bytes, shape " + shape_str(shape) + " needs " + std::to_string(need));
  return {it->second, shape, offset + header_len};
}

}  // namespace

Tensor parse_npy(const std::string& bytes, const std::string& what) {
  const NpyLayout l = parse_header(bytes, what);
  return Tensor::copy_of(l.dtype, l.shape, bytes.data() + l.data_offset);
}

Tensor map_npy(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  VOLT_CHECK(fd >= 0, Io, path + ": cannot open");
  struct stat st {};
  const bool sized = ::fstat(fd, &st) == 0 && st.st_size > 0;
  void* m = sized ? ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE,
                           MAP_PRIVATE, fd, 0)
                  : MAP_FAILED;
  ::close(fd);
  if (m == MAP_FAILED) return read_npy(path);  // (an empty file fails there, with the reason)
  const size_t size = static_cast<size_t>(st.st_size);
  std::shared_ptr<void> mapping(m, [size](void* p) { ::munmap(p, size); });
  const NpyLayout l = parse_header(std::string_view(static_cast<const char*>(m), size), path);
  char* data = static_cast<char*>(m) + l.data_offset;
  // Data misaligned for its type (a header not padded as numpy pads it): a copy.
  if (reinterpret_cast<uintptr_t>(data) % dtype_size(l.dtype) != 0)
    return Tensor::copy_of(l.dtype, l.shape, data);
  return Tensor::view(l.dtype, l.shape, data, std::move(mapping));
}

Tensor read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  VOLT_CHECK(in, Io, path + ": cannot open");
  return parse_npy(
      std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), path);
}

void write_npy(const std::string& path, const Tensor& t) {
  std::string descr;
  for (const auto& [code, dtype] : descr_types())
    if (dtype == t.dtype())
      descr = (code == "u1" || code == "i1" || code == "b1" ? "|" : "<") + code;
  if (t.dtype() == DType::BFloat16) {  // numpy has no bfloat16: widen to float32
    Tensor f = Tensor::empty(DType::Float, t.shape());
    for (int64_t i = 0; i < t.numel(); ++i)
      f.data<float>()[i] = static_cast<float>(t.data<BFloat16>()[i]);
    return write_npy(path, f);
  }
  VOLT_CHECK(!descr.empty(), NotImplemented,
             std::string("cannot write ") + dtype_name(t.dtype()) + " as .npy");
  std::string shape = "(";
  for (size_t i = 0; i < t.rank(); ++i)
    shape += std::to_string(t.dim(i)) + (t.rank() == 1 || i + 1 < t.rank() ? "," : "");
  shape += ")";
  std::string header =
      "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  VOLT_CHECK(out, Io, path + ": cannot create");
  out.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  const char len_bytes[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(len_bytes, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(t.raw()), static_cast<std::streamsize>(t.nbytes()));
  VOLT_CHECK(out.good(), Io, path + ": write failed");
}

}  // namespace volt
