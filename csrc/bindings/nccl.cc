// Python entry points of the NCCL/RCCL transport: a unique id (rank 0 makes it, the launcher's
// channel carries it: MPI or the TCP store), and the world transport from it. Without NCCL in the
// build only `have_nccl` is defined (False).
#include <pybind11/stl.h>

#include <cstring>
#include <memory>

#include "bindings/bindings.h"

#ifdef PYCOMM_WITH_NCCL
#include "common/errors.h"
#include "transport/nccl/nccl_transport.h"
#endif

namespace py = pybind11;

namespace pycomm::bind {

void register_nccl(py::module_& m) {
#ifdef PYCOMM_WITH_NCCL
  m.attr("have_nccl") = true;
  m.attr("nccl_unique_id_bytes") = static_cast<int>(sizeof(ncclUniqueId));
  m.def("nccl_version", &nccl::library_version, "The NCCL/RCCL library loaded at run time.");
  m.def(
      "nccl_unique_id",
      [] {
        ncclUniqueId id;
        ncclResult_t r;
        {
          py::gil_scoped_release nogil;
          r = ncclGetUniqueId(&id);
        }
        if (r != ncclSuccess) throw PycommError(std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
        return py::bytes(id.internal, sizeof(id.internal));
      },
      "A new NCCL unique id (on one rank; the others receive it).");
  m.def(
      "nccl_world",
      [](const py::bytes& id_bytes, int rank, int size, int device) {
        std::string raw = id_bytes;
        if (raw.size() != sizeof(ncclUniqueId))
          throw std::invalid_argument("nccl_world: unique id must be " + std::to_string(sizeof(ncclUniqueId)) +
                                      " bytes, got " + std::to_string(raw.size()));
        ncclUniqueId id;
        std::memcpy(id.internal, raw.data(), sizeof(id.internal));
        py::gil_scoped_release nogil;
        return std::shared_ptr<Transport>(nccl::NcclTransport::create(id, rank, size, device));
      },
      py::arg("unique_id"), py::arg("rank"), py::arg("size"), py::arg("device"),
      "Joins the NCCL communicator named by unique_id as `rank` of `size` on GPU `device` (collective).");
  m.def(
      "nccl_stream",
      [](const std::shared_ptr<Transport>& t) {
        auto* n = dynamic_cast<nccl::NcclTransport*>(t.get());
        if (!n) throw std::invalid_argument("nccl_stream: not an NCCL transport");
        return n->stream();
      },
      "The communication stream of an NCCL transport (a cudaStream_t as an int).");
#else
  m.attr("have_nccl") = false;
#endif
}

}  // namespace pycomm::bind
