// Each concern registers its own Python functions; module.cc only calls these.
#pragma once

#include <pybind11/pybind11.h>

namespace pycomm::bind {
void register_build_info(pybind11::module_& m);
void register_kernels(pybind11::module_& m);
void register_codecs(pybind11::module_& m);
void register_bucket_update(pybind11::module_& m);
void register_comm(pybind11::module_& m);
void register_blocking_calls(pybind11::module_& m);
void register_mpi(pybind11::module_& m);
void register_nccl(pybind11::module_& m);
void register_store(pybind11::module_& m);
void register_settings(pybind11::module_& m);
void register_trace(pybind11::module_& m);
}  // namespace pycomm::bind
