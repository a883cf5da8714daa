// Element access in double precision, for reference kernels whose arithmetic does not depend on
// the dtype: read a tensor as doubles, write doubles back, read a scalar, fill from a function.
#pragma once
#include <vector>

#include "operators/common/dispatch.hpp"
#include "runtime/graph.hpp"

namespace volt {

inline std::vector<double> to_doubles(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  dispatch_numeric(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = static_cast<const T*>(t.raw());
    for (int64_t i = 0; i < t.numel(); ++i)
      v[i] = static_cast<double>(static_cast<typename Compute<T>::type>(p[i]));
  });
  return v;
}

// value(i) for every element i, converted to the tensor's dtype.
template <class F>
void fill_from(Tensor& t, F value) {
  dispatch_numeric(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(t.raw());
    for (int64_t i = 0; i < t.numel(); ++i)
      p[i] = static_cast<T>(static_cast<typename Compute<T>::type>(value(i)));
  });
}

inline void from_doubles(Tensor& t, const std::vector<double>& v) {
  fill_from(t, [&](int64_t i) { return v[static_cast<size_t>(i)]; });
}

// Element i (flat index) as a double.
inline double value_at(const Tensor& t, int64_t i) {
  return dispatch_numeric(t.dtype(), [&](auto tag) -> double {
    using T = typename decltype(tag)::type;
    return static_cast<double>(
        static_cast<typename Compute<T>::type>(static_cast<const T*>(t.raw())[i]));
  });
}

inline double scalar_value(const Tensor& t) {
  return value_at(t, 0);
}

// A scalar input that must be a whole number in [lo, hi] (a size, a count, a step): anything
// else, NaN and infinities included, is an InvalidArgument error naming the node and the input,
// never an out-of-range conversion.
inline int64_t scalar_int(const Tensor& t, const Node& node, const char* what, int64_t lo,
                          int64_t hi) {
  const double v = scalar_value(t);
  if (!(v >= static_cast<double>(lo) && v <= static_cast<double>(hi)))
    throw Error(ErrorCode::InvalidArgument, node.describe() + ": " + what + " must be in [" +
                                                std::to_string(lo) + ", " + std::to_string(hi) +
                                                "], got " + std::to_string(v));
  return static_cast<int64_t>(v);
}

}  // namespace volt
