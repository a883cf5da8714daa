#include "errors.hpp"

#include <pybind11/pybind11.h>

#include <new>

#include "volt/volt.hpp"

namespace volt::python {

namespace py = pybind11;

namespace {

const char* class_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidArgument:
      return "InvalidArgument";
    case ErrorCode::InvalidModel:
      return "InvalidModel";
    case ErrorCode::NotImplemented:
      return "NotImplemented";
    case ErrorCode::Io:
      return "IOError";
    case ErrorCode::OutOfMemory:
      return "OutOfMemory";
    case ErrorCode::Runtime:
      return "RuntimeError";
    case ErrorCode::Device:
      return "DeviceError";
    case ErrorCode::Cancelled:
      return "Cancelled";
    case ErrorCode::Timeout:
      return "Timeout";
  }
  return "RuntimeError";
}

void raise(ErrorCode code, const char* message) {
  // Looked up each time (errors are not the fast path): no Python object outlives the module.
  const py::object cls = py::module_::import("volt._errors").attr(class_name(code));
  PyErr_SetString(cls.ptr(), message);
}

}  // namespace

void install_error_translator() {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      raise(e.code(), e.what());
    } catch (const std::bad_alloc&) {
      raise(ErrorCode::OutOfMemory, "out of memory");
    }
  });
}

}  // namespace volt::python
