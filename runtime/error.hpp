// Internal error helpers. All errors are volt::Error (include/volt/volt.hpp).
#pragma once
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

}  // namespace volt
