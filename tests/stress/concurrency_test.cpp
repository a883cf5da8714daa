// One session served from 8 threads, 1000 runs each over mixed batch sizes: every output equals
// the single-threaded result bit for bit, and resident memory stays flat after warm-up.
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "resident_memory.hpp"
#include "test_options.hpp"
#include "volt/volt.hpp"

namespace volt {
namespace {

const std::string kModels = std::string(VOLT_SOURCE_DIR) + "/models/";

using testing::resident_kib;

int runs_per_thread() {
  const char* env = std::getenv("VOLT_STRESS_RUNS");
  return env ? std::atoi(env) : 1000;
}

TEST(Concurrency, EightThreadsThousandRunsEachBitExactAndFlatMemory) {
  constexpr int kThreads = 8;
  const int runs = runs_per_thread();
  ASSERT_GE(runs, 200);
  const SessionOptions o = testing::test_options();
  Session s(kModels + "small_cnn.onnx", o);
  const std::vector<int64_t> batches = {1, 2, 3, 5, 8, 13};
  std::vector<Tensor> inputs, expected;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t b : batches) {
    Tensor x = Tensor::empty(DType::Float, {b, 1, 28, 28});
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = u(rng);
    inputs.push_back(x);
    expected.push_back(s.run({{"x", x}})[0].tensor());  // single-threaded reference
  }
  std::atomic<int> mismatches{0}, errors{0};
  size_t after_warmup = 0;
  std::barrier sync(kThreads, [&]() noexcept { after_warmup = resident_kib(); });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 pick(static_cast<unsigned>(t));
      for (int i = 0; i < runs; ++i) {
        if (i == 100) sync.arrive_and_wait();
        const size_t k = pick() % inputs.size();
        try {
          const Tensor got = s.run({{"x", inputs[k]}})[0].tensor();
          if (got.shape() != expected[k].shape() ||
              std::memcmp(got.raw(), expected[k].raw(), got.nbytes()) != 0)
            ++mismatches;
        } catch (const std::exception&) {
          ++errors;
        }
      }
    });
  for (auto& th : threads) th.join();
  const size_t after_all = resident_kib();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
  std::printf("resident memory: %zu KiB after 100 runs per thread, %zu KiB after %d\n",
              after_warmup, after_all, runs);
#if !defined(__SANITIZE_ADDRESS__)  // ASan's quarantine keeps freed memory resident
  EXPECT_LE(after_all, after_warmup + after_warmup / 10)
      << after_warmup << " KiB -> " << after_all << " KiB";
#endif
}

}  // namespace
}  // namespace volt
