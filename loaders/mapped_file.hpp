// A read-only mapping of a model file for the parser: its pages come from the page cache and go
// when it is released, right after parsing, before the weights are copied out of the proto. (A
// file of its own: <sys/mman.h> defines MAP_TYPE, which ONNX's headers use as a name.)
#pragma once
#include <cstddef>
#include <string>

namespace volt {

class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // Io errors name the path
  ~MappedFile() { release(); }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const void* data() const { return data_; }
  size_t size() const { return size_; }
  void release();

 private:
  int fd_ = -1;
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace volt
