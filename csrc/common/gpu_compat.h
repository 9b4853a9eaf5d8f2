// One GPU source for CUDA and ROCm: kernels are written against these names, and this header
// maps them to the CUDA runtime (nvcc) or the HIP runtime (hipcc). Never fork a kernel per vendor.
#pragma once

#include <stdexcept>
#include <string>

#if defined(__HIPCC__) || defined(PYCOMM_WITH_HIP)
#include <hip/hip_runtime.h>
using gpuStream_t = hipStream_t;
using gpuError_t = hipError_t;
#define gpuSuccess hipSuccess
#define gpuGetErrorString hipGetErrorString
#define gpuGetLastError hipGetLastError
#define gpuGetDevice hipGetDevice
#define gpuSetDevice hipSetDevice
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemcpyDefault hipMemcpyDefault
#define gpuStreamSynchronize hipStreamSynchronize
using gpuEvent_t = hipEvent_t;
#define gpuEventCreateWithFlags hipEventCreateWithFlags
#define gpuEventDisableTiming hipEventDisableTiming
#define gpuEventRecord hipEventRecord
#define gpuEventDestroy hipEventDestroy
#define gpuStreamWaitEvent hipStreamWaitEvent
#define gpuStreamCreateWithFlags hipStreamCreateWithFlags
#define gpuStreamNonBlocking hipStreamNonBlocking
#define gpuStreamDestroy hipStreamDestroy
#define gpuHostAlloc hipHostMalloc
#define gpuHostAllocDefault hipHostMallocDefault
#define gpuFreeHost hipHostFree
#define gpuEventQuery hipEventQuery
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventElapsedTime hipEventElapsedTime
#define gpuEventDefault hipEventDefault
#define gpuStreamQuery hipStreamQuery
#define gpuErrorNotReady hipErrorNotReady
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMallocAsync hipMallocAsync
#define gpuFreeAsync hipFreeAsync
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuGetDeviceCount hipGetDeviceCount
#define PYCOMM_GPU_RUNTIME "HIP"
#else
#include <cuda_runtime.h>
using gpuStream_t = cudaStream_t;
using gpuError_t = cudaError_t;
#define gpuSuccess cudaSuccess
#define gpuGetErrorString cudaGetErrorString
#define gpuGetLastError cudaGetLastError
#define gpuGetDevice cudaGetDevice
#define gpuSetDevice cudaSetDevice
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemcpyDefault cudaMemcpyDefault
#define gpuStreamSynchronize cudaStreamSynchronize
using gpuEvent_t = cudaEvent_t;
#define gpuEventCreateWithFlags cudaEventCreateWithFlags
#define gpuEventDisableTiming cudaEventDisableTiming
#define gpuEventRecord cudaEventRecord
#define gpuEventDestroy cudaEventDestroy
#define gpuStreamWaitEvent cudaStreamWaitEvent
#define gpuStreamCreateWithFlags cudaStreamCreateWithFlags
#define gpuStreamNonBlocking cudaStreamNonBlocking
#define gpuStreamDestroy cudaStreamDestroy
#define gpuHostAlloc cudaHostAlloc
#define gpuHostAllocDefault cudaHostAllocDefault
#define gpuFreeHost cudaFreeHost
#define gpuEventQuery cudaEventQuery
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventElapsedTime cudaEventElapsedTime
#define gpuEventDefault cudaEventDefault
#define gpuStreamQuery cudaStreamQuery
#define gpuErrorNotReady cudaErrorNotReady
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMallocAsync cudaMallocAsync
#define gpuFreeAsync cudaFreeAsync
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuGetDeviceCount cudaGetDeviceCount
#define PYCOMM_GPU_RUNTIME "CUDA"
#endif

#define PYCOMM_GPU_CHECK(expr)                                                                                         \
  do {                                                                                                                 \
    gpuError_t err_ = (expr);                                                                                          \
    if (err_ != gpuSuccess)                                                                                            \
      throw std::runtime_error(std::string(PYCOMM_GPU_RUNTIME " error in ") + #expr + ": " + gpuGetErrorString(err_)); \
  } while (0)

#if defined(__CUDACC__) || defined(__HIPCC__)
// `v` of the lane (this lane ^ mask) in this thread's group of 32 lanes: a CUDA warp, half an AMD
// wavefront (width 32). Every lane of the group must call it, in step.
__device__ inline float gpuShflXor(float v, int mask) {
#if defined(__HIPCC__)
  return __shfl_xor(v, mask, 32);
#else
  return __shfl_xor_sync(0xffffffffu, v, mask, 32);
#endif
}
#endif

namespace pycomm {
// Makes `device` current for the scope (kernels must launch on the tensor's device).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    PYCOMM_GPU_CHECK(gpuGetDevice(&prev_));
    if (device != prev_) PYCOMM_GPU_CHECK(gpuSetDevice(device));
  }
  // A destructor cannot throw; restoring a device that was current a moment ago does not fail in
  // practice, and a failure would resurface at the next checked runtime call.
  ~DeviceGuard() { (void)gpuSetDevice(prev_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
};
}  // namespace pycomm
