#include "runtime/memory_plan.hpp"

#include <algorithm>
#include <numeric>

#include "runtime/error.hpp"

namespace volt {

namespace {
constexpr size_t kAlign = 64;
size_t align_up(size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}
}  // namespace

ArenaLayout layout_arena(const std::vector<BufferLifetime>& buffers) {
  ArenaLayout out;
  out.offsets.assign(buffers.size(), -1);
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return buffers[a].bytes > buffers[b].bytes; });

  struct Placed {
    size_t begin, end;
    int first, last;
  };
  std::vector<Placed> placed;
  placed.reserve(buffers.size());
  std::vector<std::pair<size_t, size_t>> busy;  // (one allocation for every buffer's search)
  for (size_t idx : order) {
    const BufferLifetime& b = buffers[idx];
    const size_t size = align_up(std::max<size_t>(b.bytes, 1));
    // Intervals of the arena taken by buffers alive at the same time, sorted by start.
    busy.clear();
    for (const Placed& p : placed)
      if (p.first <= b.last && b.first <= p.last) busy.push_back({p.begin, p.end});
    std::sort(busy.begin(), busy.end());
    // The smallest gap that fits; else after the last busy interval.
    size_t best = SIZE_MAX, best_gap = SIZE_MAX, cursor = 0;
    for (const auto& [begin, end] : busy) {
      if (begin > cursor && begin - cursor >= size && begin - cursor < best_gap) {
        best = cursor;
        best_gap = begin - cursor;
      }
      cursor = std::max(cursor, end);
    }
    if (best == SIZE_MAX) best = cursor;
    // Past 2^62 bytes no machine has the memory; refusing here also keeps the sums exact.
    VOLT_CHECK(best <= (SIZE_MAX >> 2) && size <= (SIZE_MAX >> 2) - best, OutOfMemory,
               "the intermediate values need more than 2^62 bytes");
    out.offsets[idx] = static_cast<int64_t>(best);
    placed.push_back({best, best + size, b.first, b.last});
    out.total_bytes = std::max(out.total_bytes, best + size);
  }
  return out;
}

}  // namespace volt
