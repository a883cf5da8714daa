// NumPy .npy files (format versions 1-3, little-endian, C order) <-> Tensor.
#pragma once
#include <string>

#include "volt/volt.hpp"

namespace volt {
Tensor read_npy(const std::string& path);
Tensor parse_npy(const std::string& bytes, const std::string& what);
// The file mapped, not read: the tensor views a private (copy-on-write) mapping, so that only the
// pages of the rows used are read (each rank of a distributed `volt train` takes its share).
Tensor map_npy(const std::string& path);
void write_npy(const std::string& path, const Tensor& t);
}  // namespace volt
