// GPU 1-bit sign compression with error feedback: the arithmetic of kernels/cpu/onebit.cc.
// One source for CUDA and HIP.
#include "common/gpu_compat.h"
#include "kernels/codec_math.h"
#include "kernels/gpu/block_reduce.cuh"
#include "kernels/onebit.h"
#include "kernels/quantize.h"

namespace pycomm {
namespace {

// Each lane group of 32 threads takes whole compression blocks (gpu::for_each_codec_block; a thread block
// per compression block, with 9 barriers to sum it, ran at 30% of a copy); each thread packs whole bytes
// (8 elements). The sum of |v| is a float sum, so its order is kept exactly as it was when 256 threads
// summed a block: thread t's partial over j = t, t + 256, ... in order, then a tree that adds t + 128,
// t + 64, t + 32 (here within the lane: part[m] is thread lane + 32 m's partial), then t + 16 ... t + 1
// (group_reduce's xor steps, which for lane 0 pair exactly so, and leave every lane the same sum).
template <typename T, bool kResidual>
__global__ void __launch_bounds__(gpu::kThreads) compress_kernel(SignCompressArgs a) {
  static_assert(gpu::kGroups == 8, "the sum's order is that of a 256-thread tree");
  const T* x = static_cast<const T*>(a.x);
  gpu::for_each_codec_block(a.numel, a.block, [&](int64_t blk, int64_t b0, int64_t len, int lane) {
    float part[gpu::kGroups] = {};
    for (int64_t j0 = 0; j0 < len; j0 += gpu::kThreads) {
#pragma unroll
      for (int m = 0; m < gpu::kGroups; ++m) {
        const int64_t j = j0 + m * gpu::kLanes + lane;
        if (j < len) {
          float v = Num<T>::load(x[b0 + j]);
          if (kResidual) v += a.residual[b0 + j];
          part[m] += v < 0.0f ? -v : v;
        }
      }
    }
    const float lane_sum = ((part[0] + part[4]) + (part[2] + part[6])) + ((part[1] + part[5]) + (part[3] + part[7]));
    // the shuffles also order every lane's reads of the block before the residual writes below
    const float scale = gpu::group_reduce(lane_sum, gpu::SumOp{}) / static_cast<float>(len);
    if (lane == 0) a.scales[blk] = scale;
    for (int64_t k = lane; k < (len + 7) / 8; k += gpu::kLanes) {
      uint32_t byte = 0;
      for (int b = 0; b < 8; ++b) {
        const int64_t j = 8 * k + b;
        if (j >= len) break;
        float v = Num<T>::load(x[b0 + j]);
        if (kResidual) v += a.residual[b0 + j];
        byte |= static_cast<uint32_t>(v >= 0.0f) << b;
        if (kResidual) a.residual[b0 + j] = v - codec::sign_value(v >= 0.0f, scale);
      }
      a.bits[b0 / 8 + k] = static_cast<uint8_t>(byte);
    }
  });
}

// Lane groups take whole blocks (gpu::for_each_codec_block); each lane loads kUnroll bits (and, when
// accumulating, the outputs) before it stores any.
template <typename T, bool kAccumulate>
__global__ void __launch_bounds__(gpu::kThreads) decompress_kernel(SignDecompressArgs a) {
  using acc = typename Num<T>::acc;
  T* out = static_cast<T*>(a.out);
  gpu::for_each_codec_block(a.numel, a.block, [&](int64_t blk, int64_t b0, int64_t len, int lane) {
    const float scale = a.scales[blk];
    for (int64_t j0 = lane; j0 < len; j0 += gpu::kLanes * gpu::kUnroll) {
      uint32_t bit[gpu::kUnroll] = {};
      acc before[gpu::kUnroll] = {};
#pragma unroll
      for (int u = 0; u < gpu::kUnroll; ++u) {
        const int64_t i = b0 + j0 + u * gpu::kLanes;
        if (i < b0 + len) {
          bit[u] = (a.bits[i / 8] >> (i % 8)) & 1u;
          if (kAccumulate) before[u] = Num<T>::load(out[i]);
        }
      }
#pragma unroll
      for (int u = 0; u < gpu::kUnroll; ++u) {
        const int64_t i = b0 + j0 + u * gpu::kLanes;
        if (i < b0 + len) {
          const float d = codec::sign_value(bit[u], scale);
          out[i] = Num<T>::store(kAccumulate ? before[u] + d : d);
        }
      }
    }
  });
}

}  // namespace

void sign_compress_gpu(const SignCompressArgs& a, int device, uintptr_t stream) {
  check_sign_compress(a, "sign_compress");
  gpu::launch_over_codec_blocks(device, stream, num_blocks(a.numel, a.block), [&](unsigned grid, gpuStream_t s) {
    PYCOMM_DISPATCH_FLOAT(a.x_dtype, "sign_compress", [&] {
      if (a.residual)
        compress_kernel<scalar_t, true><<<grid, gpu::kThreads, 0, s>>>(a);
      else
        compress_kernel<scalar_t, false><<<grid, gpu::kThreads, 0, s>>>(a);
    });
  });
}

void sign_decompress_gpu(const SignDecompressArgs& a, int device, uintptr_t stream) {
  check_sign_decompress(a, "sign_decompress");
  gpu::launch_over_codec_blocks(device, stream, num_blocks(a.numel, a.block), [&](unsigned grid, gpuStream_t s) {
    PYCOMM_DISPATCH_FLOAT(a.out_dtype, "sign_decompress", [&] {
      if (a.accumulate)
        decompress_kernel<scalar_t, true><<<grid, gpu::kThreads, 0, s>>>(a);
      else
        decompress_kernel<scalar_t, false><<<grid, gpu::kThreads, 0, s>>>(a);
    });
  });
}

}  // namespace pycomm
