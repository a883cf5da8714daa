// NumPy .npy files (format versions 1-3, little-endian, C order) <-> Tensor.
#pragma once
#include <string>

#include "volt/volt.hpp"

namespace volt {
Tensor read_npy(const std::string& path);
Tensor parse_npy(const std::string& bytes, const std::string& what);
void write_npy(const std::string& path, const Tensor& t);
}  // namespace volt
