// Offsets in one arena for buffers with known sizes and lifetimes (first and last step that
// touches them): buffers whose lifetimes overlap never share bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace volt {

struct BufferLifetime {
  size_t bytes = 0;
  int first = 0;  // step that writes it
  int last = 0;   // last step that reads it
};

struct ArenaLayout {
  std::vector<int64_t> offsets;  // per buffer
  size_t total_bytes = 0;
};

// Greedy best fit, largest buffers first; every offset is 64-byte aligned.
ArenaLayout layout_arena(const std::vector<BufferLifetime>& buffers);

}  // namespace volt
