// The process's resident memory, for tests that check memory stays flat.
#pragma once
#include <cstddef>
#include <fstream>
#include <string>

namespace volt::testing {

// VmRSS from /proc/self/status, in KiB (0 where it cannot be read).
inline size_t resident_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoul(line.substr(6));
  return 0;
}

}  // namespace volt::testing
