#include <gtest/gtest.h>

#include <random>

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

}  // namespace
}  // namespace volt
