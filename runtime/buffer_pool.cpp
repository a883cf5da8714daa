#include "runtime/buffer_pool.hpp"

#include <malloc.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <tuple>
#include <vector>

#include "runtime/run_control.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define VOLT_POOL_ENABLED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define VOLT_POOL_ENABLED 0
#endif
#endif
#ifndef VOLT_POOL_ENABLED
#define VOLT_POOL_ENABLED 1
#endif

namespace volt {
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kMinPooled = size_t{64} << 10;  // below this, malloc's own bins do well
constexpr int kStepsPerDoubling = 4;             // size classes at most 19% apart

// The size class of a request and the bytes that class allocates.
int size_class(size_t bytes) {
  int log2 = 0;
  while ((size_t{1} << (log2 + 1)) <= bytes) ++log2;
  const size_t base = size_t{1} << log2;
  const size_t step = base / kStepsPerDoubling;
  const int sub = static_cast<int>((bytes - base + step - 1) / step);
  return log2 * kStepsPerDoubling + sub;
}
size_t class_bytes(int c) {
  const size_t base = size_t{1} << (c / kStepsPerDoubling);
  return base + (base / kStepsPerDoubling) * static_cast<size_t>(c % kStepsPerDoubling);
}

struct Pool {
  std::mutex mutex;
  std::vector<std::vector<void*>> free_lists = std::vector<std::vector<void*>>(64 * 4 + 4);
  size_t cached = 0;
  // Kept at most: an eighth of the machine, and 1 GiB.
  const size_t cap = std::min<size_t>(physical_memory_bytes() / 8, size_t{1} << 30);
  // Lasting buffers freed while a plan is built (see RecycleLastingBuffers), with their sizes.
  std::vector<std::pair<void*, size_t>> recycled;
  int recycling = 0;  // windows open
  ~Pool() {
    for (auto& list : free_lists)
      for (void* p : list) std::free(p);
  }
};
Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: tensors may be freed during static destruction
  return *p;
}

// Buffers of several MiB (embedding tables, optimizer state, big activations) are read at
// random rows: with 4 KiB pages nearly every row costs a TLB miss. Aligned to 2 MiB and marked
// for transparent huge pages (Debian's default THP mode is "madvise"), they take one TLB entry
// per 2 MiB.
constexpr size_t kHugePage = size_t{2} << 20;

// Small buffers: malloc'd with room to align them by hand, the distance to malloc's pointer
// kept in the byte before. glibc's aligned_alloc splits each chunk and frees the leftovers,
// whose consolidation took a fifth of the run of a model whose Loop body runs small nodes many
// times; plain malloc serves these sizes from its per-thread caches. (Under AddressSanitizer,
// aligned_alloc: exact bounds, so that an overrun is caught.)
void* small_allocate(size_t bytes) {
  if (!VOLT_POOL_ENABLED)
    return std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  void* raw = std::malloc(bytes + kAlignment);
  if (!raw) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kAlignment) & ~uintptr_t{kAlignment - 1};  // >= 1 byte in
  reinterpret_cast<unsigned char*>(aligned)[-1] = static_cast<unsigned char>(aligned - start);
  return reinterpret_cast<void*>(aligned);
}
void small_free(void* q) {
  if (!VOLT_POOL_ENABLED) return std::free(q);
  unsigned char* p = static_cast<unsigned char*>(q);
  std::free(p - p[-1]);
}

// `bytes` rounded up to `capacity`: huge pages by the bytes asked for, so that the rounding of a
// 3 MiB request to 4 MiB does not make all of it resident. (From malloc's heap, not mappings of
// their own: in a stream of mixed shapes the heap serves a request from freed memory of another
// size, where a pool of mappings faulted in 44% more pages — GPT-2 step, 200 random pasts.)
void* system_allocate(size_t bytes, size_t capacity) {
  if (bytes < kMinPooled) return small_allocate(capacity);
  if (bytes < 2 * kHugePage)
    return std::aligned_alloc(kAlignment, (capacity + kAlignment - 1) / kAlignment * kAlignment);
  const size_t rounded = (capacity + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, rounded);
  if (p) ::madvise(p, rounded, MADV_HUGEPAGE);  // a hint: failure changes nothing
  return p;
}
void system_free(void* q, size_t bytes) {
  if (bytes < kMinPooled) return small_free(q);
  std::free(q);
}

// Lasting buffers are mappings of their own (page-aligned), given back to the system when freed
// and cut to size when recycled. Those of several MiB are aligned to 2 MiB and marked for huge
// pages.
// `bytes` (a multiple of the page) of fresh anonymous memory mapped with `prot` and `flags`, its
// start aligned to a huge page: over-mapped by one, then trimmed. nullptr on failure.
void* map_aligned(size_t bytes, int prot, int flags) {
  void* raw = ::mmap(nullptr, bytes + kHugePage, prot, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) & ~uintptr_t{kHugePage - 1};
  if (aligned > start) ::munmap(raw, aligned - start);
  const size_t tail = kHugePage - (aligned - start);
  if (tail > 0) ::munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  return reinterpret_cast<void*>(aligned);
}

void* map_buffer(size_t bytes, size_t capacity) {
  if (bytes < 2 * kHugePage) {
    void* p = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
  }
  void* p = map_aligned(capacity, PROT_READ | PROT_WRITE, 0);
  if (p) ::madvise(p, capacity, MADV_HUGEPAGE);  // a hint: failure changes nothing
  return p;
}

void unmap_buffer(void* p, size_t capacity) {
  ::munmap(p, capacity);
}

constexpr size_t kPage = 4096;
size_t page_multiple(size_t bytes) {
  return (bytes + kPage - 1) / kPage * kPage;
}

// Faults pages in ahead of use, in one call (Linux 5.14); where the kernel lacks it, the run
// faults them as it touches them.
void populate(char* from, size_t bytes) {
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
  ::madvise(from, bytes, MADV_POPULATE_WRITE);  // a hint: failure changes nothing
}

// Faults in the whole pages of [p, p + bytes).
void populate_pages_of(void* p, size_t bytes) {
  const uintptr_t start = page_multiple(reinterpret_cast<uintptr_t>(p)),
                  end = (reinterpret_cast<uintptr_t>(p) + bytes) / kPage * kPage;
  if (end > start) populate(reinterpret_cast<char*>(start), end - start);
}

// A kept buffer of a class in [lo, hi], the smallest first (its bytes in *capacity); nullptr
// when there is none.
void* take_kept(int lo, int hi, size_t* capacity) {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mutex);
  for (int k = lo; k <= hi && k < static_cast<int>(p.free_lists.size()); ++k) {
    auto& list = p.free_lists[static_cast<size_t>(k)];
    if (list.empty()) continue;
    void* q = list.back();
    list.pop_back();
    *capacity = class_bytes(k);
    p.cached -= *capacity;
    return q;
  }
  return nullptr;
}

}  // namespace

void* pool_allocate(size_t bytes, size_t* capacity) {
  if (!VOLT_POOL_ENABLED || bytes < kMinPooled) {
    *capacity = bytes;
    return system_allocate(bytes, bytes);
  }
  const int c = size_class(bytes);
  if (void* q = take_kept(c, c + kStepsPerDoubling, capacity)) return q;
  *capacity = class_bytes((c + kStepsPerDoubling - 1) / kStepsPerDoubling * kStepsPerDoubling);
  void* q = system_allocate(bytes, *capacity);
  // All of it faulted in now, in one call: a buffer kept for larger requests (a decoder's present
  // keys and values, a graph output at each longer past) otherwise faults the pages past the
  // last request at each of them. (Below huge pages only: those of several MiB fault 2 MiB at a
  // time, and a large model's big tensors would make memory resident that no run may touch.)
  if (q && *capacity > bytes && *capacity < 2 * kHugePage) populate_pages_of(q, *capacity);
  return q;
}

size_t size_class_bytes(size_t bytes) {
  return bytes <= 64 ? 64 : class_bytes(size_class(bytes));
}

void pool_free(void* q, size_t bytes) noexcept {
  if (!q) return;
  if (!VOLT_POOL_ENABLED || bytes < kMinPooled) {
    system_free(q, bytes);
    return;
  }
  const int c = size_class(bytes);
  Pool& p = pool();
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    if (p.cached + class_bytes(c) <= p.cap) {
      try {
        p.free_lists[static_cast<size_t>(c)].push_back(q);
        p.cached += class_bytes(c);
        return;
      } catch (...) {  // no room to remember it: give it back
      }
    }
  }
  std::free(q);
}

void* lasting_allocate(size_t bytes) {
  if (!VOLT_POOL_ENABLED || bytes < kMinPooled) return system_allocate(bytes, bytes);
  const size_t size = page_multiple(bytes);
  Pool& p = pool();
  void* q = nullptr;
  size_t held = 0;
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    auto best = p.recycled.end();
    for (auto it = p.recycled.begin(); it != p.recycled.end(); ++it)
      if (it->second >= size && (best == p.recycled.end() || it->second < best->second)) best = it;
    if (best != p.recycled.end()) {
      std::tie(q, held) = *best;
      p.recycled.erase(best);
    }
  }
  if (!q) return map_buffer(bytes, size);
  // The pages past the request go back now: the buffer is then exactly what lasting_free expects.
  if (held > size) unmap_buffer(static_cast<char*>(q) + size, held - size);
  return q;
}

void lasting_free(void* q, size_t bytes) noexcept {
  if (!q) return;
  if (!VOLT_POOL_ENABLED || bytes < kMinPooled) return system_free(q, bytes);
  const size_t size = page_multiple(bytes);
  Pool& p = pool();
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    if (p.recycling > 0) try {
        p.recycled.emplace_back(q, size);
        return;
      } catch (...) {  // no room to remember it: give it back
      }
  }
  unmap_buffer(q, size);
}

namespace {

// Run arenas: address space reserved once and made usable as runs need it, so that an arena
// grows in place and keeps the pages it has. Each region serves one run at a time; a run at a
// larger shape than before faults only the pages past what earlier runs touched, and a smaller
// one touches none. (pool_allocate's buffers, one per size class, each faulted its own pages:
// every class a growing shape crossed was faulted in whole again, and all of them stayed
// resident.) Free regions whose usable bytes pass the pool's cap are unmapped.
struct ArenaRegion {
  char* base;
  size_t reserved;  // address space
  size_t usable;    // readable and writable from base; what may be resident
  bool in_use;
};
struct ArenaRegions {
  std::mutex mutex;
  std::vector<ArenaRegion> list;
  size_t free_usable = 0;
};
ArenaRegions& arena_regions() {
  static ArenaRegions* r = new ArenaRegions;  // never destroyed, like the pool
  return *r;
}

// Address space per region: untouched, reserved pages cost neither memory nor commit charge.
constexpr size_t kArenaReservation = size_t{1} << 30;
// What a growing region makes resident beyond the run's request, at most: a large model's arena
// growing by a little (a batch of 9 after 8) does not quadruple its resident size.
constexpr size_t kGrowthAhead = size_t{8} << 20;

// What a region is made usable to for a request: pages, rounded up to the pool's size classes (a
// quarter of a power of two), so that slowly growing shapes do not change the mapping each run.
size_t usable_bytes(size_t bytes) {
  return page_multiple(class_bytes(size_class(bytes)));
}

// Makes [from, to) of the region usable; huge pages for arenas of several MiB, like the pool's.
bool make_usable(ArenaRegion& region, size_t to) {
  if (::mprotect(region.base + region.usable, to - region.usable, PROT_READ | PROT_WRITE) != 0)
    return false;
  region.usable = to;
  if (to >= 2 * kHugePage) ::madvise(region.base, to, MADV_HUGEPAGE);  // a hint
  return true;
}

// A new region of `reserved` bytes (rounded up to huge pages), its start aligned to one; base
// null on failure.
ArenaRegion reserve_region_of(size_t reserved) {
  reserved = (reserved + kHugePage - 1) / kHugePage * kHugePage;
  void* p = map_aligned(reserved, PROT_NONE, MAP_NORESERVE);
  return {static_cast<char*>(p), p ? reserved : 0, 0, false};
}
ArenaRegion reserve_region(size_t bytes) {
  const ArenaRegion roomy = reserve_region_of(std::max(kArenaReservation, bytes));
  return roomy.base ? roomy : reserve_region_of(bytes);  // (under an address-space limit)
}

}  // namespace

void* arena_allocate(size_t bytes, size_t* capacity) {
  if (!VOLT_POOL_ENABLED || bytes < kMinPooled) return pool_allocate(bytes, capacity);
  const size_t wanted = usable_bytes(bytes);
  ArenaRegions& r = arena_regions();
  std::lock_guard<std::mutex> lock(r.mutex);
  // The free region with the most usable bytes: its pages are the likeliest to be resident.
  ArenaRegion* best = nullptr;
  for (ArenaRegion& region : r.list)
    if (!region.in_use && region.reserved >= wanted && (!best || region.usable > best->usable))
      best = &region;
  if (!best) {
    ArenaRegion fresh = reserve_region(wanted);
    if (!fresh.base) return nullptr;
    try {
      r.list.push_back(fresh);
    } catch (...) {
      ::munmap(fresh.base, fresh.reserved);
      return nullptr;
    }
    best = &r.list.back();
  }
  if (best->usable < bytes) {
    const size_t before = best->usable;
    // A region that grows quadruples (by at most kGrowthAhead past the request), its new pages
    // faulted in at once (one call): runs at growing shapes (a decoder's past, longer sentences)
    // then fault at a few of them rather than a little at each. (Doubling grew a text
    // classifier's arena at four of eight lengths from 20 to 240 tokens, whose memory grows with
    // the square of the length: its first run at a new length was a median 1.90-2.05 x its
    // steady run in bench/corpus/dynamic_shapes.py, 1.64-1.74 quadrupling; the recognizer's
    // 1.52-1.64 -> 1.37-1.45.)
    const size_t to = before == 0
                          ? wanted
                          : std::min(best->reserved,
                                     std::max(wanted, std::min(4 * before, wanted + kGrowthAhead)));
    if (!make_usable(*best, to)) return nullptr;
    if (before > 0) populate(best->base + before, to - before);
    r.free_usable += best->usable - before;
  }
  best->in_use = true;
  r.free_usable -= best->usable;
  *capacity = best->usable;
  return best->base;
}

void arena_free(void* p, size_t capacity) noexcept {
  if (!p) return;
  if (!VOLT_POOL_ENABLED || capacity < kMinPooled) return pool_free(p, capacity);
  ArenaRegions& r = arena_regions();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (size_t i = 0; i < r.list.size(); ++i) {
    ArenaRegion& region = r.list[i];
    if (region.base != p) continue;
    if (r.free_usable + region.usable > pool().cap) {  // more kept than the pool may keep
      ::munmap(region.base, region.reserved);
      r.list.erase(r.list.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
    region.in_use = false;
    r.free_usable += region.usable;
    return;
  }
}

RecycleLastingBuffers::RecycleLastingBuffers() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mutex);
  ++p.recycling;
}

RecycleLastingBuffers::~RecycleLastingBuffers() {
  Pool& p = pool();
  std::vector<std::pair<void*, size_t>> left;
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    if (--p.recycling == 0) left.swap(p.recycled);
  }
  for (const auto& [q, size] : left) unmap_buffer(q, size);
}

namespace {
std::atomic<bool> heap_top_padded{false};
}  // namespace

void keep_freed_memory() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!VOLT_POOL_ENABLED) return;
    for (const char* set_by_user :
         {"MALLOC_TOP_PAD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "GLIBC_TUNABLES",
          "VOLT_SYSTEM_MALLOC"})
      if (std::getenv(set_by_user)) return;
    ::mallopt(M_TOP_PAD, 16 << 20);
    heap_top_padded = true;
  });
}

size_t heap_bytes_in_use() {
  return ::mallinfo2().uordblks;
}

void warm_heap_for_plans(size_t bytes) {
  if (!heap_top_padded) return;  // (glibc would give the pages back at once)
  // Blocks under the mmap threshold (128 KiB with the pad set), so that they come from the
  // heap; freed in reverse, they merge into its top, which the pad keeps. Pages already
  // resident there (another session's warming) cost nothing again.
  constexpr size_t kBlock = 32 << 10, kMost = 8 << 20;
  const size_t count = std::min(bytes, kMost) / kBlock;
  std::vector<void*> blocks;
  blocks.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    void* p = std::malloc(kBlock);
    if (!p) break;
    std::memset(p, 0, kBlock);
    blocks.push_back(p);
  }
  for (size_t i = blocks.size(); i-- > 0;) std::free(blocks[i]);
}

}  // namespace volt
