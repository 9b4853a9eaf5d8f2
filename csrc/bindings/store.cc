// Python face of the TCP store (pycomm.TCPStore). Blocking calls release the GIL; socket
// timeouts become TimeoutError and lost connections ConnectionError.
#include <pybind11/stl.h>

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "bindings/bindings.h"
#include "rendezvous/tcp_store.h"

namespace py = pybind11;

namespace pycomm::bind {

void register_store(py::module_& m) {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const net::SocketTimeout& e) {
      PyErr_SetString(PyExc_TimeoutError, e.what());
    } catch (const net::SocketError& e) {
      PyErr_SetString(PyExc_ConnectionError, e.what());
    }
  });

  using release = py::call_guard<py::gil_scoped_release>;
  py::class_<TCPStore, std::shared_ptr<TCPStore>>(
      m, "TCPStore", "Key-value store over TCP: rank 0 serves it (is_server=True), every rank connects.")
      .def(py::init<const std::string&, int, int, bool, double>(), py::arg("host"), py::arg("port"),
           py::arg("world_size"), py::arg("is_server"), py::arg("timeout"), release())
      .def(
          "set",
          [](TCPStore& s, const std::string& key, const py::bytes& value) {
            std::string v = value;
            py::gil_scoped_release nogil;
            s.set(key, v);
          },
          py::arg("key"), py::arg("value"))
      .def(
          "get",
          [](TCPStore& s, const std::string& key, double timeout) {
            std::string v;
            {
              py::gil_scoped_release nogil;
              v = s.get(key, timeout);
            }
            return py::bytes(v);
          },
          py::arg("key"), py::arg("timeout") = -1.0,
          "Waits until key is set (timeout < 0: the store's timeout); returns its bytes.")
      .def("add", &TCPStore::add, py::arg("key"), py::arg("delta"), release())
      .def("check", &TCPStore::check, py::arg("key"), release())
      .def("wait", &TCPStore::wait, py::arg("keys"), py::arg("timeout") = -1.0, release())
      .def("barrier", &TCPStore::barrier, py::arg("timeout") = -1.0, release())
      .def("close", &TCPStore::close, release())
      .def_property_readonly("host", &TCPStore::host)
      .def_property_readonly("port", &TCPStore::port)
      .def_property_readonly("world_size", &TCPStore::world_size)
      .def_property_readonly("timeout", &TCPStore::timeout)
      .def("__repr__", [](const TCPStore& s) {
        return "TCPStore(" + s.address() + ", world_size=" + std::to_string(s.world_size()) + ")";
      });
}

}  // namespace pycomm::bind
