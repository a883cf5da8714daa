// What CUDA tests share: without a CUDA device (or in a build without the backend) they skip
// and say why.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "runtime/device.hpp"

namespace volt::testing {

// Why CUDA tests cannot run here, or "" when they can.
inline std::string cuda_unavailable() {
  try {
    require_device(Device{Device::Kind::Cuda, 0});
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

}  // namespace volt::testing

#define SKIP_WITHOUT_CUDA()                                      \
  do {                                                           \
    const std::string why = ::volt::testing::cuda_unavailable(); \
    if (!why.empty()) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)
