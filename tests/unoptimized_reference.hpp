// The answer every optimization pass must keep: a model run with all passes (level 2) against
// the same model with none (level 0), on the same inputs.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "test_options.hpp"
#include "volt/volt.hpp"

namespace volt::testing {

// Float outputs within `tol` relative to max(1, |reference|) (the tolerance says why where a
// test sets one: folded weights reassociate sums, oneDNN blocks reductions); others, and floats
// at tol 0, bit for bit. Same dtypes and shapes.
inline void expect_same_as_unoptimized(const std::string& bytes, const NamedValues& feeds,
                                       float tol = 2e-5f) {
  Session plain =
      Session::from_bytes(bytes.data(), bytes.size(), test_options({.optimization_level = 0}));
  Session opt =
      Session::from_bytes(bytes.data(), bytes.size(), test_options({.optimization_level = 2}));
  const auto a = plain.run(feeds), b = opt.run(feeds);
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    const Tensor& x = a[k].tensor();
    const Tensor& y = b[k].tensor();
    ASSERT_EQ(x.dtype(), y.dtype()) << "output " << k;
    ASSERT_EQ(x.shape(), y.shape()) << "output " << k;
    if (x.dtype() != DType::Float || tol == 0) {
      ASSERT_EQ(std::memcmp(x.raw(), y.raw(), x.nbytes()), 0) << "output " << k;
      continue;
    }
    for (int64_t i = 0; i < x.numel(); ++i)
      ASSERT_NEAR(x.data<float>()[i], y.data<float>()[i],
                  tol * std::max(1.0f, std::abs(x.data<float>()[i])))
          << "output " << k << " element " << i;
  }
}

}  // namespace volt::testing
