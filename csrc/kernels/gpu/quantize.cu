// GPU blockwise absmax quantize / dequantize (int8 and int4): the arithmetic of kernels/cpu/quantize.cc
// through the shared element math of codec_math.h and the formats of quantize.h, so both back ends
// produce the same bytes for the same seed. One source for CUDA and HIP.
#include "common/gpu_compat.h"
#include "kernels/codec_math.h"
#include "kernels/flags.h"
#include "kernels/gpu/block_reduce.cuh"
#include "kernels/quantize.h"

namespace pycomm {
namespace {

// Each lane group of 32 threads takes whole quantization blocks (gpu::for_each_codec_block); each thread
// writes whole units (L::kGroup elements: a byte). The block's absmax and its non-finite flag come from
// shuffles, not a thread block's barriers (a thread block per quantization block ran at 12% of a copy):
// a max, and a sum that is only ever 0 or NaN, come out the same whatever the order.
template <typename L, typename T, bool kResidual, bool kStochastic>
__global__ void __launch_bounds__(gpu::kThreads) quantize_kernel(AbsmaxQuantizeArgs<typename L::Data> a) {
  constexpr int G = L::kGroup;
  const T* x = static_cast<const T*>(a.x);
  codec::UniformStream uniform(a.seed);  // this thread's indices only grow: one key per 2^32 elements
  gpu::for_each_codec_block(a.numel, a.block, [&](int64_t blk, int64_t b0, int64_t len, int lane) {
    float amax = 0.0f, nonfinite = 0.0f;
    for (int64_t j = lane; j < len; j += gpu::kLanes) {
      float v = Num<T>::load(x[b0 + j]);
      if (kResidual) v += a.residual[b0 + j];
      const float m = v < 0.0f ? -v : v;
      amax = m > amax ? m : amax;
      nonfinite += v * 0.0f;
    }
    // every lane's reads of the block are done once its values are in the reduction: the residual writes
    // below cannot overtake another lane's read
    amax = gpu::group_reduce(amax, gpu::MaxOp{});
    nonfinite = gpu::group_reduce(nonfinite, gpu::SumOp{});
    const float scale = codec::absmax_scale<L::kMax>(amax, nonfinite);
    const float div = codec::level_divisor(scale);
    if (lane == 0) a.scales[blk] = scale;
    const bool bad_block = codec::nonfinite_block(nonfinite);  // uniform across the group
    for (int64_t k = lane; k < (len + G - 1) / G; k += gpu::kLanes) {
      int32_t levels[G] = {};
      for (int h = 0; h < G && k * G + h < len; ++h) {
        const int64_t i = b0 + k * G + h;
        float v = Num<T>::load(x[i]);
        if (kResidual) v += a.residual[i];
        const float u = kStochastic ? uniform(i) : 0.0f;
        levels[h] = bad_block ? 0 : codec::absmax_level<L::kMax, kStochastic>(v, div, u);
        if (kResidual) a.residual[i] = bad_block ? v - scale : v - codec::mul_rn(static_cast<float>(levels[h]), scale);
      }
      a.q[b0 / G + k] = L::put(levels);
    }
  });
}

// Lane groups take whole blocks (gpu::for_each_codec_block); each lane loads kUnroll levels (and, when
// accumulating, the outputs) before it stores any.
template <typename L, typename T, bool kAccumulate>
__global__ void __launch_bounds__(gpu::kThreads) dequantize_kernel(AbsmaxDequantizeArgs<typename L::Data> a) {
  using acc = typename Num<T>::acc;
  T* out = static_cast<T*>(a.out);
  gpu::for_each_codec_block(a.numel, a.block, [&](int64_t blk, int64_t b0, int64_t len, int lane) {
    const float scale = a.scales[blk];
    for (int64_t j0 = lane; j0 < len; j0 += gpu::kLanes * gpu::kUnroll) {
      int32_t level[gpu::kUnroll] = {};
      acc before[gpu::kUnroll] = {};
#pragma unroll
      for (int u = 0; u < gpu::kUnroll; ++u) {
        const int64_t i = b0 + j0 + u * gpu::kLanes;
        if (i < b0 + len) {
          level[u] = L::get(a.q, i);
          if (kAccumulate) before[u] = Num<T>::load(out[i]);
        }
      }
#pragma unroll
      for (int u = 0; u < gpu::kUnroll; ++u) {
        const int64_t i = b0 + j0 + u * gpu::kLanes;
        if (i < b0 + len) {
          const float d = codec::mul_rn(static_cast<float>(level[u]), scale);
          out[i] = Num<T>::store(kAccumulate ? before[u] + d : d);
        }
      }
    }
  });
}

template <typename L>
void quantize_gpu(const AbsmaxQuantizeArgs<typename L::Data>& a, int device, uintptr_t stream, const char* what) {
  check_quantize(a, what);
  gpu::launch_over_codec_blocks(device, stream, num_blocks(a.numel, a.block), [&](unsigned grid, gpuStream_t s) {
    PYCOMM_DISPATCH_FLOAT(a.x_dtype, what, [&] {
      with_flags(
          [&](auto residual, auto stochastic) {
            quantize_kernel<L, scalar_t, decltype(residual)::value, decltype(stochastic)::value>
                <<<grid, gpu::kThreads, 0, s>>>(a);
          },
          a.residual != nullptr, a.stochastic);
    });
  });
}

template <typename L>
void dequantize_gpu(const AbsmaxDequantizeArgs<typename L::Data>& a, int device, uintptr_t stream, const char* what) {
  check_dequantize(a, what);
  gpu::launch_over_codec_blocks(device, stream, num_blocks(a.numel, a.block), [&](unsigned grid, gpuStream_t s) {
    PYCOMM_DISPATCH_FLOAT(a.out_dtype, what, [&] {
      if (a.accumulate)
        dequantize_kernel<L, scalar_t, true><<<grid, gpu::kThreads, 0, s>>>(a);
      else
        dequantize_kernel<L, scalar_t, false><<<grid, gpu::kThreads, 0, s>>>(a);
    });
  });
}

}  // namespace

void quantize_int8_gpu(const QuantizeArgs& a, int device, uintptr_t stream) {
  quantize_gpu<Int8Levels>(a, device, stream, "quantize_int8");
}
void dequantize_int8_gpu(const DequantizeArgs& a, int device, uintptr_t stream) {
  dequantize_gpu<Int8Levels>(a, device, stream, "dequantize_int8");
}
void quantize_int4_gpu(const Int4QuantizeArgs& a, int device, uintptr_t stream) {
  quantize_gpu<Int4Levels>(a, device, stream, "quantize_int4");
}
void dequantize_int4_gpu(const Int4DequantizeArgs& a, int device, uintptr_t stream) {
  dequantize_gpu<Int4Levels>(a, device, stream, "dequantize_int4");
}

}  // namespace pycomm
