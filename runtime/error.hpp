// Internal error helpers. All errors are volt::Error (include/volt/volt.hpp).
#pragma once
#include <new>
#include <stdexcept>
#include <string>

#include "volt/volt.hpp"

namespace volt {

[[noreturn]] inline void fail(ErrorCode code, const std::string& message) {
  throw Error(code, message);
}

// Checks a condition; the message expression is only evaluated on failure.
#define VOLT_CHECK(cond, code, message)                            \
  do {                                                             \
    if (!(cond)) ::volt::fail(::volt::ErrorCode::code, (message)); \
  } while (0)

// Runs f; anything it throws leaves as volt::Error, so that the public API keeps its promise
// even where a library (the standard one, protobuf) throws its own: std::bad_alloc becomes
// OutOfMemory, any other exception a Runtime error carrying its message.
template <class F>
auto as_volt_error(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::OutOfMemory, "out of memory");
  } catch (const std::exception& e) {
    throw Error(ErrorCode::Runtime, std::string("internal error: ") + e.what());
  }
}

}  // namespace volt
