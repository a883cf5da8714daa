// Turns the fuzzer's bytes into decisions: a little reader that never fails (past the end it
// returns zeros), so every input is a valid program for the targets.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace volt::fuzz {

class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | byte();
    return v;
  }
  // A number in [0, n).
  size_t below(size_t n) { return n ? u32() % n : 0; }
  // Up to `max` bytes as a string.
  std::string text(size_t max) {
    const size_t n = below(max + 1);
    std::string s;
    for (size_t i = 0; i < n && pos_ < size_; ++i) s += static_cast<char>(byte());
    return s;
  }
  // Whatever bytes are left.
  std::string rest() {
    std::string s(reinterpret_cast<const char*>(data_ + pos_), size_ - pos_);
    pos_ = size_;
    return s;
  }
  bool empty() const { return pos_ >= size_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace volt::fuzz
