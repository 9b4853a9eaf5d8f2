// Where a kernel call runs: device < 0 means the CPU; otherwise a GPU ordinal and a stream handle.
#pragma once

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "diagnostics/nvtx.h"
#include "kernels/segments.h"

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

// Runs kernel args `a` with the GIL released inside an NVTX range `name` carrying `bytes` (the kernel's
// input data): cpu_fn(a) for device < 0, else gpu_fn(a, device, stream).
#ifdef PYCOMM_WITH_GPU
#define PYCOMM_RUN_KERNEL(name, bytes, cpu_fn, gpu_fn, a, device, stream) \
  do {                                                                    \
    pybind11::gil_scoped_release nogil_;                                  \
    pycomm::NvtxScope range_((name), (bytes), (device));                  \
    if ((device) >= 0)                                                    \
      gpu_fn((a), (device), (stream));                                    \
    else                                                                  \
      cpu_fn(a);                                                          \
  } while (0)
#else
#define PYCOMM_RUN_KERNEL(name, bytes, cpu_fn, gpu_fn, a, device, stream) \
  do {                                                                    \
    (void)(stream);                                                       \
    pybind11::gil_scoped_release nogil_;                                  \
    pycomm::NvtxScope range_((name), (bytes), (device));                  \
    cpu_fn(a);                                                            \
  } while (0)
#endif

namespace pycomm::bind {
// Bytes of the tensors a multi-tensor kernel walks (its NVTX range's payload).
inline int64_t segment_bytes(const std::vector<Segment>& segs, DType t) {
  int64_t n = 0;
  for (const Segment& s : segs) n += s.numel;
  return n * static_cast<int64_t>(dtype_size(t));
}
}  // namespace pycomm::bind
