#include "bindings/bindings.h"
#include "bindings/errors.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "pycomm compiled core: kernels and transports on raw buffers (no libtorch).";
  pycomm::bind::register_settings(m);
  pycomm::bind::register_build_info(m);
  pycomm::bind::register_kernels(m);
  pycomm::bind::register_codecs(m);
  pycomm::bind::register_bucket_update(m);
  pycomm::bind::register_exceptions(m);
  pycomm::bind::register_comm(m);
  pycomm::bind::register_blocking_calls(m);
  pycomm::bind::register_mpi(m);
  pycomm::bind::register_nccl(m);
  pycomm::bind::register_store(m);
  pycomm::bind::register_trace(m);
}
