#include "bindings/errors.h"

#include "common/errors.h"

namespace py = pybind11;

namespace pycomm::bind {
namespace {

// The Python classes live in pycomm/errors.py (importable without this module). Handles are leaked
// on purpose: they must outlive interpreter teardown.
PyObject* g_base = nullptr;
PyObject* g_stall = nullptr;
PyObject* g_mismatch = nullptr;

// True when `p` is one of ours (the Python error is then set).
bool set_pycomm_error(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const StallError& e) {
    PyErr_SetString(g_stall, e.what());
    return true;
  } catch (const MismatchError& e) {
    PyErr_SetString(g_mismatch, e.what());
    return true;
  } catch (const PycommError& e) {
    PyErr_SetString(g_base, e.what());
    return true;
  } catch (...) {
  }
  return false;
}

}  // namespace

void register_exceptions(py::module_& m) {
  py::module_ errors = py::module_::import("pycomm.errors");
  g_base = py::object(errors.attr("PycommError")).release().ptr();
  g_stall = py::object(errors.attr("StallError")).release().ptr();
  g_mismatch = py::object(errors.attr("MismatchError")).release().ptr();
  py::register_exception_translator([](std::exception_ptr p) {
    if (!set_pycomm_error(p) && p) std::rethrow_exception(p);  // on to pybind11's own translators
  });
  m.attr("PycommError") = py::handle(g_base);
  m.attr("StallError") = py::handle(g_stall);
  m.attr("MismatchError") = py::handle(g_mismatch);
}

void set_python_error(std::exception_ptr e) {
  if (!set_pycomm_error(e)) py::detail::translate_exception(e);
}

}  // namespace pycomm::bind
