#include "host/device_copy.h"

#include <cstring>
#include <stdexcept>

#ifdef PYCOMM_WITH_GPU
#include "common/gpu_compat.h"
#endif

namespace pycomm {

void copy_bytes(void* dst, const void* src, size_t bytes, int device, uintptr_t stream) {
  if (bytes == 0 || dst == src) return;
  if (device < 0) {
    std::memcpy(dst, src, bytes);
    return;
  }
#ifdef PYCOMM_WITH_GPU
  DeviceGuard guard(device);
  auto s = reinterpret_cast<gpuStream_t>(stream);
  PYCOMM_GPU_CHECK(gpuMemcpyAsync(dst, src, bytes, gpuMemcpyDefault, s));
  PYCOMM_GPU_CHECK(gpuStreamSynchronize(s));
#else
  (void)stream;
  throw std::invalid_argument("got a GPU buffer, but this build of pycomm has no CUDA/HIP support");
#endif
}

}  // namespace pycomm
