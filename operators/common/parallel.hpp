// parallel_for: body(i) for i in [0, n), across the session's OpenMP threads when `parallel`
// holds and in a plain loop otherwise.
//
// Why not `#pragma omp parallel for if (cond)`: with the condition false, libgomp still builds a
// team of one thread, about 1.7 µs on the development machine (measured), more than many small
// kernels take; a DLRM-style model at batch 1 runs dozens of them per inference. Here a false
// condition costs a branch.
#pragma once
#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace volt {

template <class Body>
inline void parallel_for(int64_t n, bool parallel, Body&& body) {
  if (parallel && n > 1) {
    // (Files built without OpenMP, the CUDA backend's host code, run the plain loop.)
#ifdef _OPENMP
#pragma omp parallel for
#endif
    for (int64_t i = 0; i < n; ++i) body(i);
  } else {
    for (int64_t i = 0; i < n; ++i) body(i);
  }
}

// body(lo, hi) over [0, n) in chunks of `grain` elements, in parallel when there is more than one
// chunk: elementwise loops keep a plain inner loop the compiler vectorizes.
template <class Body>
inline void parallel_chunks(int64_t n, int64_t grain, Body&& body) {
  const int64_t chunks = n > 0 ? (n + grain - 1) / grain : 0;
  parallel_for(chunks, chunks > 1, [&](int64_t c) {
    const int64_t lo = c * grain;
    body(lo, n - lo < grain ? n : lo + grain);
  });
}

// body(rank, size, barrier) on a team of at most `team` threads at once, for work whose threads
// must meet between phases (a recurrence's steps): barrier() returns when every thread of the
// team has called it. `size` is the team OpenMP gave (fewer than asked inside another parallel
// region): the body splits its work by it. Nothing may be thrown out of the body.
template <class Body>
inline void parallel_team(int64_t team, Body&& body) {
#ifdef _OPENMP
  if (team > 1) {
#pragma omp parallel num_threads(static_cast <int>(team))
    {
      const auto barrier = [] {
#pragma omp barrier
      };
      body(static_cast<int64_t>(omp_get_thread_num()), static_cast<int64_t>(omp_get_num_threads()),
           barrier);
    }
    return;
  }
#endif
  body(int64_t{0}, int64_t{1}, [] {});
}

}  // namespace volt
