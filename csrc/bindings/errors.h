// C++ exceptions as the Python classes of pycomm/errors.py (and pybind11's for the standard ones).
#pragma once

#include <pybind11/pybind11.h>

#include <exception>

namespace pycomm::bind {

void register_exceptions(pybind11::module_& m);
// Sets the Python error for `e` (the GIL held): what every binding raises for it, for entry points
// that pybind11 does not dispatch (blocking_calls.cc).
void set_python_error(std::exception_ptr e);

}  // namespace pycomm::bind
