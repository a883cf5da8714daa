// numpy arrays (and lists, None, CSR matrices) <-> volt::Value, for the Python module.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "volt/volt.hpp"

namespace volt::python {

namespace py = pybind11;

// Cached numpy dtypes; call once at module init, with the GIL held.
void init_dtypes();

// A fed Python object as a volt value. `expected` (may be null) is what the model declares for
// the input `name`: it decides whether a list is a sequence, and which dtype a Python list or
// scalar (which has none of its own) becomes. numpy arrays keep their dtype: a mismatch is the
// session's error (naming the input, the declared and the given type), never a cast. A
// C-contiguous, aligned array is read in place (the value holds a reference to it).
Value to_value(py::handle obj, const ValueInfo* expected, const std::string& name);

// A CSR matrix from its three arrays (any array-likes; indices widened to int64), checked.
CsrTensor csr_from_arrays(py::handle values, py::handle col_indices, py::handle row_offsets,
                          int64_t rows, int64_t cols, const std::string& name);

// A feed dict as named values, in the dict's order.
NamedValues to_named_values(const py::dict& feed, const std::vector<ValueInfo>& declared);

// A value as Python: a tensor as a numpy array that owns the tensor's buffer (no copy; strings
// and bfloat16 are converted), a sequence as a list, an empty optional as None, a CSR matrix as
// a volt.CsrTensor.
py::object to_python(Value v);

// The host buffers `values` read from (for spotting outputs that alias a fed array).
struct FedRange {
  const char* begin;
  const char* end;
};
std::vector<FedRange> fed_ranges(const NamedValues& values);

// "tensor(float)", "seq(tensor(int64))": ONNX Runtime's spelling of a declared type.
std::string onnx_type_string(const ValueInfo& info);

}  // namespace volt::python
