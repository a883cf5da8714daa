#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <random>
#include <vector>

#include "runtime/buffer_pool.hpp"
#include "runtime/memory_plan.hpp"

namespace volt {
namespace {

bool overlap(int64_t a, size_t as, int64_t b, size_t bs) {
  return a < b + static_cast<int64_t>(bs) && b < a + static_cast<int64_t>(as);
}

TEST(ArenaLayout, BuffersAliveTogetherNeverShareBytes) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<BufferLifetime> bufs;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      const int first = static_cast<int>(rng() % 30);
      bufs.push_back({1 + rng() % 5000, first, first + static_cast<int>(rng() % 8)});
    }
    const ArenaLayout l = layout_arena(bufs);
    size_t peak_live = 0;
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(l.offsets[i] % 64, 0);
      EXPECT_LE(static_cast<size_t>(l.offsets[i]) + bufs[i].bytes, l.total_bytes);
      for (int j = i + 1; j < n; ++j) {
        const bool alive_together = bufs[i].first <= bufs[j].last && bufs[j].first <= bufs[i].last;
        if (alive_together) {
          EXPECT_FALSE(overlap(l.offsets[i], bufs[i].bytes, l.offsets[j], bufs[j].bytes))
              << "trial " << trial;
        }
      }
    }
    for (int step = 0; step < 40; ++step) {
      size_t live = 0;
      for (const auto& b : bufs)
        if (b.first <= step && step <= b.last) live += b.bytes;
      peak_live = std::max(peak_live, live);
    }
    EXPECT_GE(l.total_bytes, peak_live);
  }
}

TEST(ArenaLayout, ReusesMemoryOfDeadBuffers) {
  // A chain: each buffer lives for two steps. Two slots suffice however long the chain is.
  std::vector<BufferLifetime> chain;
  for (int i = 0; i < 50; ++i) chain.push_back({4096, i, i + 1});
  const ArenaLayout l = layout_arena(chain);
  EXPECT_EQ(l.total_bytes, 2u * 4096u);
}

// Plans for several shapes share a layout while their buffers live as before and fit its slots;
// a buffer past its slot, or one living longer, gets a new layout, whose slots hold every buffer
// (with room to grow) apart from those alive with it.
TEST(ArenaLayout, PlansForOtherShapesTakeTheLayoutWhereTheirBuffersFit) {
  const std::vector<BufferLifetime> at_17 = {{17 * 256, 0, 2}, {17 * 1024, 1, 3}, {4096, 2, 4}};
  const auto first = layout_arena_for_shapes(at_17, nullptr);
  for (size_t i = 0; i < at_17.size(); ++i) EXPECT_GE(first->slots[i].bytes, at_17[i].bytes);
  EXPECT_GT(first->slots[0].bytes, at_17[0].bytes);  // room for the next lengths
  for (size_t i = 0; i < at_17.size(); ++i)
    for (size_t j = i + 1; j < at_17.size(); ++j) {
      if (at_17[i].first > at_17[j].last || at_17[j].first > at_17[i].last) continue;
      EXPECT_FALSE(overlap(first->layout.offsets[i], first->slots[i].bytes,
                           first->layout.offsets[j], first->slots[j].bytes));
    }

  std::vector<BufferLifetime> at_18 = at_17;
  at_18[0].bytes = 18 * 256;
  at_18[1].bytes = 18 * 1024;
  EXPECT_EQ(layout_arena_for_shapes(at_18, first), first);

  std::vector<BufferLifetime> at_40 = at_17;
  at_40[1].bytes = 40 * 1024;  // past its slot
  const auto grown = layout_arena_for_shapes(at_40, first);
  EXPECT_NE(grown, first);
  EXPECT_GE(grown->slots[1].bytes, at_40[1].bytes);
  EXPECT_FALSE(overlap(grown->layout.offsets[1], grown->slots[1].bytes, grown->layout.offsets[2],
                       grown->slots[2].bytes));

  std::vector<BufferLifetime> longer = at_17;
  longer[0].last = 4;  // now alive with the third buffer
  EXPECT_NE(layout_arena_for_shapes(longer, first), first);
  std::vector<BufferLifetime> more = at_17;
  more.push_back({64, 4, 4});
  EXPECT_NE(layout_arena_for_shapes(more, first), first);
}

// Buffers for growing input shapes (graph outputs, values shaped at run time): a fresh one is
// rounded up to a power of two, and a larger request up to that size gets the kept buffer back
// (pages earlier runs touched), not fresh pages.
// (Under AddressSanitizer the pool keeps nothing: exact sizes, fresh buffers.)
TEST(BufferPool, BuffersOfGrowingSizesReuseOneRoomyBuffer) {
  size_t capacity = 0;
  void* first = pool_allocate(600 << 10, &capacity);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 64, 0u);
  EXPECT_GE(capacity, size_t{600} << 10);
  EXPECT_LE(capacity, size_t{1200} << 10);
#if !defined(__SANITIZE_ADDRESS__)
  static_cast<char*>(first)[capacity - 1] = 1;  // all of it is the caller's
  pool_free(first, capacity);
  size_t again = 0;
  void* second = pool_allocate(capacity - 1, &again);  // a larger arena than before
  EXPECT_EQ(second, first);
  EXPECT_EQ(again, capacity);
  pool_free(second, again);
#else
  pool_free(first, capacity);
#endif
  size_t small = 0;
  void* tiny = pool_allocate(100, &small);  // below the pool: as asked
  ASSERT_NE(tiny, nullptr);
  EXPECT_EQ(small, 100u);
  pool_free(tiny, small);
}

// A fresh buffer rounded up for larger requests comes with all its pages in, not only the
// request's: the next, larger requests (a decoder's present keys and values at a longer past)
// then write no page that faults. Read with mincore(); where the kernel cannot populate
// (MADV_POPULATE_WRITE, Linux 5.14), the pages come in as they are touched and the test skips.
TEST(BufferPool, RoomyBuffersComeWithTheirPages) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "under AddressSanitizer the pool keeps nothing: exact sizes";
#else
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  {
    void* probe = ::mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(probe, MAP_FAILED);
    const bool can_populate = ::madvise(probe, page, 23 /* MADV_POPULATE_WRITE */) == 0;
    ::munmap(probe, page);
    if (!can_populate) GTEST_SKIP() << "this kernel has no MADV_POPULATE_WRITE";
  }
  // (A size no other test leaves in the pool, between two of its power-of-two classes.)
  const size_t asked = (size_t{1} << 20) + (size_t{1} << 19) + 4096;
  size_t capacity = 0;
  void* p = pool_allocate(asked, &capacity);
  ASSERT_NE(p, nullptr);
  ASSERT_GT(capacity, asked + 64 * page) << "not rounded up: nothing to check";
  const uintptr_t start = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page,
                  end = (reinterpret_cast<uintptr_t>(p) + capacity) / page * page;
  std::vector<unsigned char> resident((end - start) / page);
  ASSERT_EQ(::mincore(reinterpret_cast<void*>(start), end - start, resident.data()), 0) << errno;
  size_t missing = 0;
  for (unsigned char r : resident) missing += (r & 1) ? 0 : 1;
  EXPECT_EQ(missing, 0u) << "of " << resident.size() << " pages, past the " << asked
                         << " bytes asked for";
  pool_free(p, capacity);
#endif
}

// Run arenas grow in place: a larger arena after a smaller one is the same region, with the
// pages (and bytes) the first run left; one taken while another is in use is a region of its
// own. (Under AddressSanitizer arenas are plain allocations.)
TEST(BufferPool, ArenasGrowInPlaceKeepingTheirPages) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "under AddressSanitizer arenas are plain allocations";
#else
  size_t capacity = 0;
  auto* first = static_cast<unsigned char*>(arena_allocate(600 << 10, &capacity));
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 4096, 0u);
  EXPECT_GE(capacity, size_t{600} << 10);
  first[0] = 42;
  first[capacity - 1] = 7;  // all of it is the caller's
  arena_free(first, capacity);

  size_t grown = 0;
  auto* second = static_cast<unsigned char*>(arena_allocate(3 * capacity, &grown));
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second, first) << "the arena did not grow in place";
  EXPECT_GE(grown, 3 * capacity);
  EXPECT_EQ(second[0], 42) << "its pages did not stay";
  EXPECT_EQ(second[capacity - 1], 7);
  second[grown - 1] = 1;

  size_t other = 0;
  auto* concurrent = static_cast<unsigned char*>(arena_allocate(100 << 10, &other));
  ASSERT_NE(concurrent, nullptr);
  EXPECT_TRUE(concurrent + other <= second || second + grown <= concurrent)
      << "two runs were given overlapping arenas";
  concurrent[0] = 1;
  arena_free(concurrent, other);
  arena_free(second, grown);
#endif
}

// A region that must grow grows well ahead of the request (four times its size, at most 8 MiB
// past the request), so that runs at slowly growing shapes grow it at few of them; the next
// requests up to that size take it as it is.
TEST(BufferPool, ArenasGrowAheadOfGrowingRequests) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "under AddressSanitizer arenas are plain allocations";
#else
  // (Whichever free region serves it, fresh or left by another test: the one with the most
  // usable bytes, which the next, larger request must grow.)
  size_t capacity = 0;
  void* first = arena_allocate(size_t{700} << 10, &capacity);
  ASSERT_NE(first, nullptr);
  size_t held = 0;  // another run's, meanwhile: the next request must take `first` again
  void* other = arena_allocate(size_t{64} << 10, &held);
  arena_free(first, capacity);
  size_t grown = 0;
  void* second = arena_allocate(capacity + 4096, &grown);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second, first);
  EXPECT_GE(grown, 4 * capacity) << "grew by " << grown - capacity << " bytes only";
  arena_free(second, grown);
  size_t again = 0;
  void* third = arena_allocate(3 * capacity, &again);
  EXPECT_EQ(third, first);
  EXPECT_EQ(again, grown) << "a request within the grown size grew the region again";
  arena_free(third, again);
  arena_free(other, held);
#endif
}

// While planning recycles lasting buffers, a dropped weight's buffer becomes the next packed
// copy that fits in it (cut to that copy's size), with the pages it has.
TEST(BufferPool, PlanningRecyclesLastingBuffers) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "under AddressSanitizer lasting buffers are plain allocations";
#else
  const RecycleLastingBuffers recycle;
  auto* weight = static_cast<unsigned char*>(lasting_allocate(3 << 20));
  ASSERT_NE(weight, nullptr);
  weight[0] = 42;
  lasting_free(weight, 3 << 20);
  auto* copy = static_cast<unsigned char*>(lasting_allocate(1 << 20));
  EXPECT_EQ(copy, weight) << "the freed weight's buffer was not reused";
  EXPECT_EQ(copy[0], 42) << "its pages did not come along";
  copy[(1 << 20) - 1] = 1;  // all of it is the caller's
  lasting_free(copy, 1 << 20);
#endif
}

}  // namespace
}  // namespace volt
