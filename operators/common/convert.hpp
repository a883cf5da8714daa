// One element converted between dtypes as Cast does it, defined for every value: NaN, infinities
// and floats out of the integer range become 0 (C++ leaves those conversions undefined), integers
// wrap through int64 like numpy's.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "operators/common/dispatch.hpp"

namespace volt {

template <class S, class D>
D convert(S v) {
  if constexpr (std::is_same_v<D, bool>) {
    return static_cast<typename Compute<S>::type>(v) != 0;
  } else if constexpr (std::is_same_v<S, bool>) {
    return static_cast<D>(static_cast<typename Compute<D>::type>(v ? 1 : 0));
  } else if constexpr (std::is_same_v<D, Float16> || std::is_same_v<D, BFloat16>) {
    return D(static_cast<float>(static_cast<typename Compute<S>::type>(v)));
  } else {
    using CS = typename Compute<S>::type;
    const CS c = static_cast<CS>(v);
    if constexpr (std::is_floating_point_v<CS> && std::is_integral_v<D>) {
      // Out-of-range and NaN conversions are undefined in C++; saturate-free wrap like numpy
      // would crash, so go through int64 which every finite float below 2^63 fits.
      if (!std::isfinite(c)) return D(0);
      const double d = static_cast<double>(c);
      if (d >= 9.2e18 || d <= -9.2e18) return D(0);
      return static_cast<D>(static_cast<int64_t>(d));
    } else {
      return static_cast<D>(c);
    }
  }
}

// Every element of `src` converted into `dst` as Cast converts it: numeric and bool dtypes, the
// same number of elements.
void convert_elements(const Tensor& src, Tensor& dst);

// A new tensor holding `src` converted to `dtype`.
Tensor converted(const Tensor& src, DType dtype);

}  // namespace volt
