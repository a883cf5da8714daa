// volt::Error as Python exceptions: one class per ErrorCode, defined in volt/_errors.py.
#pragma once

namespace volt::python {

// Registers the translator; volt._errors is imported on the first error.
void install_error_translator();

}  // namespace volt::python
