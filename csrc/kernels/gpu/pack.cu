// GPU pack / unpack: the same arithmetic as kernels/cpu/pack.cc, one source for CUDA and HIP.
#include <type_traits>

#include "common/gpu_compat.h"
#include "kernels/gpu/segments.cuh"
#include "kernels/pack.h"

namespace pycomm {
namespace {

// Pack: bucket[k] = cast(t[j] * scale); unpack: t[j] = cast(bucket[k] * scale). load() computes the
// element's new value, store() writes it (gpu::segment_kernel).
template <bool kPack, typename T, typename B>
struct ConvertOp {
  using Value = typename std::conditional<kPack, B, T>::type;
  B* bucket;
  typename Num<T>::acc scale;
  __device__ Value load(void* tensor, int64_t k, int64_t j) const {
    if constexpr (kPack)
      return Num<B>::store(Num<T>::load(static_cast<const T*>(tensor)[j]) * scale);
    else
      return Num<T>::store(Num<B>::load(bucket[k]) * scale);
  }
  __device__ void store(void* tensor, int64_t k, int64_t j, Value v) const {
    if constexpr (kPack)
      bucket[k] = v;
    else
      static_cast<T*>(tensor)[j] = v;
  }
};

template <bool kPack, typename W>
struct CopyOp {  // same dtype, unscaled: any element type of W's width
  using Value = W;
  W* bucket;
  __device__ W load(void* tensor, int64_t k, int64_t j) const {
    return kPack ? static_cast<const W*>(tensor)[j] : bucket[k];
  }
  __device__ void store(void* tensor, int64_t k, int64_t j, W v) const {
    if (kPack)
      bucket[k] = v;
    else
      static_cast<W*>(tensor)[j] = v;
  }
};

template <bool kPack>
void run(const PackArgs& a, int device, uintptr_t stream_handle, const char* what) {
  check_pack_dtypes(a, what);
  if (a.segs.empty()) return;
  if (a.bucket == nullptr) throw std::invalid_argument(std::string(what) + ": bucket has a null data pointer");
  DeviceGuard guard(device);
  auto stream = reinterpret_cast<gpuStream_t>(stream_handle);
  if (is_plain_copy(a)) {
    switch (dtype_size(a.tensor_dtype)) {
      case 1:
        return gpu::launch_segments(a.segs, stream, CopyOp<kPack, uint8_t>{static_cast<uint8_t*>(a.bucket)});
      case 2:
        return gpu::launch_segments(a.segs, stream, CopyOp<kPack, uint16_t>{static_cast<uint16_t*>(a.bucket)});
      case 4:
        return gpu::launch_segments(a.segs, stream, CopyOp<kPack, uint32_t>{static_cast<uint32_t*>(a.bucket)});
      default:
        return gpu::launch_segments(a.segs, stream, CopyOp<kPack, uint64_t>{static_cast<uint64_t*>(a.bucket)});
    }
  }
  PYCOMM_DISPATCH_FLOAT(a.tensor_dtype, what, [&] {
    using T = scalar_t;
    PYCOMM_DISPATCH_FLOAT(a.bucket_dtype, what, [&] {
      using B = scalar_t;
      gpu::launch_segments(
          a.segs, stream,
          ConvertOp<kPack, T, B>{static_cast<B*>(a.bucket), static_cast<typename Num<T>::acc>(a.scale)});
    });
  });
}

}  // namespace

void pack_gpu(const PackArgs& a, int device, uintptr_t stream) { run<true>(a, device, stream, "pack"); }
void unpack_gpu(const PackArgs& a, int device, uintptr_t stream) { run<false>(a, device, stream, "unpack"); }

}  // namespace pycomm
