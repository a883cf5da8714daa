// Calls a generic lambda with the C++ type of a runtime dtype:
//   dispatch_numeric(t.dtype(), [&](auto tag) { using T = typename decltype(tag)::type; ... });
#pragma once
#include <string>
#include <type_traits>

#include "runtime/error.hpp"
#include "volt/volt.hpp"

namespace volt {

template <class T>
struct TypeTag {
  using type = T;
};

template <class F>
decltype(auto) dispatch_numeric(DType dtype, F&& f, const char* what = "this op") {
  switch (dtype) {
    case DType::Float:
      return f(TypeTag<float>{});
    case DType::Double:
      return f(TypeTag<double>{});
    case DType::Float16:
      return f(TypeTag<Float16>{});
    case DType::BFloat16:
      return f(TypeTag<BFloat16>{});
    case DType::Int8:
      return f(TypeTag<int8_t>{});
    case DType::Int16:
      return f(TypeTag<int16_t>{});
    case DType::Int32:
      return f(TypeTag<int32_t>{});
    case DType::Int64:
      return f(TypeTag<int64_t>{});
    case DType::UInt8:
      return f(TypeTag<uint8_t>{});
    case DType::UInt16:
      return f(TypeTag<uint16_t>{});
    case DType::UInt32:
      return f(TypeTag<uint32_t>{});
    case DType::UInt64:
      return f(TypeTag<uint64_t>{});
    case DType::Bool:
      return f(TypeTag<bool>{});
    default:
      fail(ErrorCode::NotImplemented, std::string(what) + " does not support " + dtype_name(dtype));
  }
}

// Like dispatch_numeric, also strings: for ops that only move elements.
template <class F>
decltype(auto) dispatch_any(DType dtype, F&& f, const char* what = "this op") {
  if (dtype == DType::String) return f(TypeTag<std::string>{});
  return dispatch_numeric(dtype, std::forward<F>(f), what);
}

// The type arithmetic happens in: float for the 16-bit floats, the type itself otherwise.
template <class T>
struct Compute {
  using type = T;
};
template <>
struct Compute<Float16> {
  using type = float;
};
template <>
struct Compute<BFloat16> {
  using type = float;
};

template <class T>
inline typename Compute<T>::type widen(T v) {
  return static_cast<typename Compute<T>::type>(v);
}
template <class T, class C>
inline T narrow(C v) {
  return static_cast<T>(v);
}

// For kernels of floating-point types: f(tag) for float, double, float16 and bfloat16 (T's
// Compute type a C++ floating type), `ctx.error` for any other dtype.
template <class Ctx, class F>
void dispatch_floating(DType dtype, const Ctx& ctx, F&& f) {
  dispatch_numeric(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<typename Compute<T>::type>)
      f(tag);
    else
      ctx.error("needs floating-point input");
  });
}

}  // namespace volt
