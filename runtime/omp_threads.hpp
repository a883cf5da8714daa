// Sets OpenMP's thread count for a scope (a run, or building a plan) and restores what it found.
// Plans must be built under the session's count too: oneDNN sizes a primitive's work split by
// the threads there are when it is created, and runs that many whatever the count at run time.
#pragma once
#include <omp.h>

namespace volt {

class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int threads) : previous_(omp_get_max_threads()) {
    if (threads > 0) omp_set_num_threads(threads);
  }
  ~ScopedOmpThreads() { omp_set_num_threads(previous_); }
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int previous_;
};

}  // namespace volt
