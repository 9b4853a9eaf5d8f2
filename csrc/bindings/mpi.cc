// Python entry points of the MPI transport: the world, communicators from mpi4py handles, and
// finalisation. Without MPI in the build only `have_mpi` is defined (False).
#include <pybind11/stl.h>

#include "bindings/bindings.h"

#ifdef PYCOMM_WITH_MPI
#include "transport/mpi/mpi_env.h"
#include "transport/mpi/mpi_transport.h"
#endif

namespace py = pybind11;

namespace pycomm::bind {

void register_mpi(py::module_& m) {
#ifdef PYCOMM_WITH_MPI
  m.attr("have_mpi") = true;
  m.def(
      "mpi_world", [] { return std::shared_ptr<Transport>(mpi::MpiTransport::duplicate_of(MPI_COMM_WORLD)); },
      py::call_guard<py::gil_scoped_release>(), "A transport over a duplicate of MPI_COMM_WORLD (initialises MPI).");
  m.def(
      "mpi_from_fortran",
      [](int64_t handle) {
        mpi::ensure_initialized();
        MPI_Comm comm = MPI_Comm_f2c(static_cast<MPI_Fint>(handle));
        if (comm == MPI_COMM_NULL) throw std::invalid_argument("from_mpi4py: the communicator is MPI.COMM_NULL");
        return std::shared_ptr<Transport>(mpi::MpiTransport::duplicate_of(comm));
      },
      py::arg("handle"), py::call_guard<py::gil_scoped_release>(),
      "A transport over a duplicate of the communicator with this Fortran handle (mpi4py's comm.py2f()).");
  m.def("mpi_finalize", &mpi::finalize, py::call_guard<py::gil_scoped_release>());
  m.def(
      "mpi_abort",
      [](int exit_code) {
        int initialized = 0;
        MPI_Initialized(&initialized);
        if (!initialized || mpi::finalized()) return false;
        MPI_Abort(MPI_COMM_WORLD, exit_code);  // ends every process of the job; returns only if the MPI fails to
        return true;
      },
      py::arg("exit_code"), py::call_guard<py::gil_scoped_release>(),
      "MPI_Abort(MPI_COMM_WORLD, exit_code) when MPI is running (the launcher ends every rank); False when "
      "MPI was never initialised or is finalised.");
  m.def("mpi_info", [] {
    py::dict d;
    mpi::ensure_initialized();
    d["library"] = mpi::library_version();
    d["gpu_aware"] = mpi::gpu_aware();
    d["initialized_by_pycomm"] = mpi::initialized_by_pycomm();
    return d;
  });
#else
  m.attr("have_mpi") = false;
#endif
}

}  // namespace pycomm::bind
