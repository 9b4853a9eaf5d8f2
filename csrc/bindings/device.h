// Where a kernel call runs: device < 0 means the CPU; otherwise a GPU ordinal and a stream handle.
#pragma once

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
