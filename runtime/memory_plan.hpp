// Offsets in one arena for buffers with known sizes and lifetimes (first and last step that
// touches them): buffers whose lifetimes overlap never share bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
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

// A layout that plans for other input shapes may take as it is: the buffers it was made for,
// with the bytes each slot holds (at least what its buffer asked for), and their offsets.
struct SharedArenaLayout {
  std::vector<BufferLifetime> slots;
  ArenaLayout layout;
};

// The layout for `buffers` in a plan for one of several input shapes: `previous` itself where it
// serves them (as many buffers, each living from and to the same steps and fitting its slot),
// else a new one whose slots are rounded up to the buffer pool's size classes (at most 25%
// more), so that the next, slightly larger shape of a growing input (a decoder's past, a longer
// sentence) fits it too. Laying out a decoder step's 300 buffers took 18 us of each new past's
// plan; checking that they fit takes one pass over them.
std::shared_ptr<const SharedArenaLayout> layout_arena_for_shapes(
    const std::vector<BufferLifetime>& buffers, std::shared_ptr<const SharedArenaLayout> previous);

}  // namespace volt
