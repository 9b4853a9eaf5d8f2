// GPU multi-tensor bucket update (averaging apply, elastic pull, lerp): the arithmetic of
// kernels/cpu/bucket_update.cc over the shared segment walk. One source for CUDA and HIP.
#include "common/gpu_compat.h"
#include "kernels/bucket_update.h"
#include "kernels/gpu/segments.cuh"

namespace pycomm {
namespace {

// x[j] = alpha * x[j] + (beta * y[k] + gamma * z[k]): load() computes the new x[j], store() writes it
// (gpu::segment_kernel).
template <typename T, typename B, bool kTwoBuckets>
struct UpdateOp {
  using acc = typename Num<T>::acc;
  using Value = T;
  const B* y;
  const B* z;
  acc alpha, beta, gamma;
  __device__ T load(void* tensor, int64_t k, int64_t j) const {
    const T* x = static_cast<const T*>(tensor);
    acc t = beta * static_cast<acc>(Num<B>::load(y[k]));
    if (kTwoBuckets) t += gamma * static_cast<acc>(Num<B>::load(z[k]));
    return Num<T>::store(alpha * Num<T>::load(x[j]) + t);
  }
  __device__ void store(void* tensor, int64_t k, int64_t j, T v) const { static_cast<T*>(tensor)[j] = v; }
};

template <typename T, typename B, bool kTwoBuckets>
void launch(const BucketUpdateArgs& a, gpuStream_t stream) {
  using acc = typename Num<T>::acc;
  gpu::launch_segments(
      a.segs, stream,
      UpdateOp<T, B, kTwoBuckets>{static_cast<const B*>(a.y), static_cast<const B*>(a.z), static_cast<acc>(a.alpha),
                                  static_cast<acc>(a.beta), static_cast<acc>(a.gamma)});
}

}  // namespace

void bucket_update_gpu(const BucketUpdateArgs& a, int device, uintptr_t stream) {
  check_bucket_update(a, "bucket_update");
  if (a.segs.empty()) return;
  DeviceGuard guard(device);
  auto s = reinterpret_cast<gpuStream_t>(stream);
  PYCOMM_DISPATCH_FLOAT(a.tensor_dtype, "bucket_update", [&] {
    using T = scalar_t;
    PYCOMM_DISPATCH_FLOAT(a.bucket_dtype, "bucket_update",
                          [&] { return a.z ? launch<T, scalar_t, true>(a, s) : launch<T, scalar_t, false>(a, s); });
  });
}

}  // namespace pycomm
