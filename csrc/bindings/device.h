// Where a kernel call runs: device < 0 means the CPU; otherwise a GPU ordinal and a stream handle.
#pragma once

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

namespace pycomm::bind {

// A GPU buffer handed to a build without GPU kernels is refused with a message saying how to fix it.
inline void require_gpu_build(int device, const char* what) {
#ifndef PYCOMM_WITH_GPU
  if (device >= 0)
    throw std::invalid_argument(std::string(what) +
                                ": got a GPU buffer, but this build of pycomm has no CUDA/HIP support "
                                "(rebuild with nvcc or hipcc on PATH, or PYCOMM_CUDA=on / PYCOMM_HIP=on)");
#else
  (void)device;
  (void)what;
#endif
}

}  // namespace pycomm::bind

// Runs kernel args `a` with the GIL released: cpu_fn(a) for device < 0, else gpu_fn(a, device, stream).
#ifdef PYCOMM_WITH_GPU
#define PYCOMM_RUN_KERNEL(cpu_fn, gpu_fn, a, device, stream)   \
  do {                                                         \
    pybind11::gil_scoped_release nogil_;                       \
    if ((device) >= 0) gpu_fn((a), (device), (stream));        \
    else cpu_fn(a);                                            \
  } while (0)
#else
#define PYCOMM_RUN_KERNEL(cpu_fn, gpu_fn, a, device, stream)   \
  do {                                                         \
    (void)(stream);                                            \
    pybind11::gil_scoped_release nogil_;                       \
    cpu_fn(a);                                                 \
  } while (0)
#endif
