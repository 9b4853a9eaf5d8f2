// GPU int8 blockwise quantize / dequantize: the arithmetic of kernels/cpu/quantize.cc through the
// shared element math of codec_math.h, so both back ends produce the same bytes for the same seed.
// One source for CUDA and HIP.
#include "common/gpu_compat.h"
#include "kernels/codec_math.h"
#include "kernels/gpu/block_reduce.cuh"
#include "kernels/quantize.h"

namespace pycomm {
namespace {

// One thread block per quantization block (grid-stride over blocks).
template <typename T, bool kResidual, bool kStochastic>
__global__ void __launch_bounds__(gpu::kThreads) quantize_kernel(QuantizeArgs a) {
  __shared__ float scratch[gpu::kThreads];
  const T* x = static_cast<const T*>(a.x);
  const int64_t nblocks = num_blocks(a.numel, a.block);
  for (int64_t blk = blockIdx.x; blk < nblocks; blk += gridDim.x) {
    const int64_t b0 = blk * a.block;
    const int64_t len = a.block < a.numel - b0 ? a.block : a.numel - b0;
    float amax = 0.0f, nonfinite = 0.0f;
    for (int64_t j = threadIdx.x; j < len; j += gpu::kThreads) {
      float v = Num<T>::load(x[b0 + j]);
      if (kResidual) v += a.residual[b0 + j];
      const float m = v < 0.0f ? -v : v;
      amax = m > amax ? m : amax;
      nonfinite += v * 0.0f;
    }
    amax = gpu::block_reduce(amax, scratch, gpu::MaxOp{});
    nonfinite = gpu::block_reduce(nonfinite, scratch, gpu::SumOp{});
    const float scale = codec::int8_scale(amax, nonfinite);
    const float div = codec::int8_divisor(scale);
    if (threadIdx.x == 0) a.scales[blk] = scale;
    for (int64_t j = threadIdx.x; j < len; j += gpu::kThreads) {
      float v = Num<T>::load(x[b0 + j]);
      if (kResidual) v += a.residual[b0 + j];
      const float u = kStochastic ? codec::uniform(a.seed, b0 + j) : 0.0f;
      const float l = codec::int8_level<kStochastic>(v, div, u);
      a.q[b0 + j] = static_cast<int8_t>(static_cast<int32_t>(l));
      if (kResidual) a.residual[b0 + j] = v - codec::mul_rn(l, scale);
    }
  }
}

template <typename T, bool kAccumulate>
__global__ void __launch_bounds__(gpu::kThreads) dequantize_kernel(DequantizeArgs a) {
  T* out = static_cast<T*>(a.out);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * gpu::kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * gpu::kThreads + threadIdx.x; i < a.numel; i += stride) {
    const float d = codec::mul_rn(static_cast<float>(a.q[i]), a.scales[i / a.block]);
    out[i] = Num<T>::store(kAccumulate ? Num<T>::load(out[i]) + d : d);
  }
}

}  // namespace

void quantize_int8_gpu(const QuantizeArgs& a, int device, uintptr_t stream) {
  check_quantize(a, "quantize_int8");
  if (a.numel == 0) return;
  DeviceGuard guard(device);
  auto s = reinterpret_cast<gpuStream_t>(stream);
  const unsigned grid = gpu::grid_for(num_blocks(a.numel, a.block));
  PYCOMM_DISPATCH_FLOAT(a.x_dtype, "quantize_int8", [&] {
    const bool r = a.residual != nullptr;
    if (a.stochastic && r) quantize_kernel<scalar_t, true, true><<<grid, gpu::kThreads, 0, s>>>(a);
    else if (a.stochastic) quantize_kernel<scalar_t, false, true><<<grid, gpu::kThreads, 0, s>>>(a);
    else if (r) quantize_kernel<scalar_t, true, false><<<grid, gpu::kThreads, 0, s>>>(a);
    else quantize_kernel<scalar_t, false, false><<<grid, gpu::kThreads, 0, s>>>(a);
  });
  PYCOMM_GPU_CHECK(gpuGetLastError());
}

void dequantize_int8_gpu(const DequantizeArgs& a, int device, uintptr_t stream) {
  check_dequantize(a, "dequantize_int8");
  if (a.numel == 0) return;
  DeviceGuard guard(device);
  auto s = reinterpret_cast<gpuStream_t>(stream);
  const unsigned grid = gpu::grid_for((a.numel + gpu::kThreads - 1) / gpu::kThreads);
  PYCOMM_DISPATCH_FLOAT(a.out_dtype, "dequantize_int8", [&] {
    if (a.accumulate) dequantize_kernel<scalar_t, true><<<grid, gpu::kThreads, 0, s>>>(a);
    else dequantize_kernel<scalar_t, false><<<grid, gpu::kThreads, 0, s>>>(a);
  });
  PYCOMM_GPU_CHECK(gpuGetLastError());
}

}  // namespace pycomm
