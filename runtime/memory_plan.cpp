#include "runtime/memory_plan.hpp"

#include <algorithm>
#include <numeric>

#include "runtime/buffer_pool.hpp"
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
  // Kept in order of their offsets, so that the intervals taken by buffers alive at the same
  // time come in order without a sort per buffer (a new shape lays out every buffer again).
  std::vector<Placed> placed;
  placed.reserve(buffers.size());
  for (size_t idx : order) {
    const BufferLifetime& b = buffers[idx];
    const size_t size = align_up(std::max<size_t>(b.bytes, 1));
    // The smallest gap between intervals taken by buffers alive at the same time that fits;
    // else after the last of them.
    size_t best = SIZE_MAX, best_gap = SIZE_MAX, cursor = 0;
    for (const Placed& p : placed) {
      if (p.first > b.last || b.first > p.last) continue;
      if (p.begin > cursor && p.begin - cursor >= size && p.begin - cursor < best_gap) {
        best = cursor;
        best_gap = p.begin - cursor;
      }
      cursor = std::max(cursor, p.end);
    }
    if (best == SIZE_MAX) best = cursor;
    // Past 2^62 bytes no machine has the memory; refusing here also keeps the sums exact.
    VOLT_CHECK(best <= (SIZE_MAX >> 2) && size <= (SIZE_MAX >> 2) - best, OutOfMemory,
               "the intermediate values need more than 2^62 bytes");
    out.offsets[idx] = static_cast<int64_t>(best);
    const Placed p{best, best + size, b.first, b.last};
    placed.insert(
        std::upper_bound(placed.begin(), placed.end(), p,
                         [](const Placed& x, const Placed& y) { return x.begin < y.begin; }),
        p);
    out.total_bytes = std::max(out.total_bytes, best + size);
  }
  return out;
}

}  // namespace volt

namespace volt {

std::shared_ptr<const SharedArenaLayout> layout_arena_for_shapes(
    const std::vector<BufferLifetime>& buffers, std::shared_ptr<const SharedArenaLayout> previous) {
  auto fits = [&](const SharedArenaLayout& p) {
    if (p.slots.size() != buffers.size()) return false;
    for (size_t i = 0; i < buffers.size(); ++i)
      if (buffers[i].first != p.slots[i].first || buffers[i].last != p.slots[i].last ||
          buffers[i].bytes > p.slots[i].bytes)
        return false;
    return true;
  };
  if (previous && fits(*previous)) return previous;
  auto made = std::make_shared<SharedArenaLayout>();
  made->slots = buffers;
  for (BufferLifetime& slot : made->slots) slot.bytes = size_class_bytes(slot.bytes);
  made->layout = layout_arena(made->slots);
  return made;
}

}  // namespace volt
