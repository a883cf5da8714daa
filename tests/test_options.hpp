// Session threads for tests: VOLT_TEST_THREADS where it is set (the tsan preset sets 1, since
// ThreadSanitizer cannot see libgomp's synchronization and reports its teams as races).
#pragma once
#include <cstdlib>

#include "volt/volt.hpp"

namespace volt::testing {

// VOLT_TEST_THREADS, or `otherwise` where it is not set.
inline int test_threads(int otherwise = 0) {
  const char* v = std::getenv("VOLT_TEST_THREADS");
  return v ? std::atoi(v) : otherwise;
}

// `o` with the threads VOLT_TEST_THREADS asks for.
inline SessionOptions test_options(SessionOptions o = {}) {
  o.threads = test_threads(o.threads);
  return o;
}

}  // namespace volt::testing
