#include "kernels/quantize.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/check.h"
#include "kernels/codec_math.h"
#include "kernels/cpu/parallel.h"

namespace pycomm {

void check_quantize(const QuantizeArgs& a, const char* what) {
  require(a.block >= 1, what, "block must be >= 1, got " + std::to_string(a.block));
  require(a.numel >= 0, what, "numel must be >= 0");
  if (!is_floating(a.x_dtype)) throw_bad_dtype(what, a.x_dtype, "float32, float64, float16 or bfloat16");
  require(a.numel == 0 || (a.x && a.q && a.scales), what, "x, q and scales need data pointers");
}

void check_dequantize(const DequantizeArgs& a, const char* what) {
  require(a.block >= 1, what, "block must be >= 1, got " + std::to_string(a.block));
  require(a.numel >= 0, what, "numel must be >= 0");
  if (!is_floating(a.out_dtype)) throw_bad_dtype(what, a.out_dtype, "float32, float64, float16 or bfloat16");
  require(a.numel == 0 || (a.q && a.scales && a.out), what, "q, scales and out need data pointers");
}

namespace {

// One block [b0, b0 + len): amax pass, then the encode pass (the block is in L1 by then).
template <typename T, bool kResidual, bool kStochastic>
void quantize_block(const QuantizeArgs& a, int64_t b0, int64_t len) {
  const T* __restrict x = static_cast<const T*>(a.x) + b0;
  float* __restrict e = kResidual ? a.residual + b0 : nullptr;
  int8_t* __restrict q = a.q + b0;
  float amax = 0.0f, nonfinite = 0.0f;
#pragma omp simd reduction(max : amax) reduction(+ : nonfinite)
  for (int64_t j = 0; j < len; ++j) {
    float v = Num<T>::load(x[j]);
    if (kResidual) v += e[j];
    const float m = v < 0.0f ? -v : v;
    amax = m > amax ? m : amax;
    nonfinite += v * 0.0f;
  }
  const float scale = codec::int8_scale(amax, nonfinite);
  const float div = codec::int8_divisor(scale);
  a.scales[b0 / a.block] = scale;

  // The random stream key depends on the high half of the index: constant unless the block
  // straddles a multiple of 2^32 (then the generic per-element form is used).
  const uint64_t first = static_cast<uint64_t>(b0), last = static_cast<uint64_t>(b0 + len - 1);
  const bool one_key = (first >> 32) == (last >> 32);
  const uint32_t key = codec::stream_key(a.seed, static_cast<uint32_t>(first >> 32));
  const uint32_t lo = static_cast<uint32_t>(first);
  if (kStochastic && !one_key) {
    for (int64_t j = 0; j < len; ++j) {
      float v = Num<T>::load(x[j]);
      if (kResidual) v += e[j];
      const float l = codec::int8_level<true>(v, div, codec::uniform(a.seed, b0 + j));
      q[j] = static_cast<int8_t>(static_cast<int32_t>(l));
      if (kResidual) e[j] = v - codec::mul_rn(l, scale);
    }
    return;
  }
#pragma omp simd
  for (int64_t j = 0; j < len; ++j) {
    float v = Num<T>::load(x[j]);
    if (kResidual) v += e[j];
    const float u = kStochastic ? codec::uniform_keyed(key, lo + static_cast<uint32_t>(j)) : 0.0f;
    const float l = codec::int8_level<kStochastic>(v, div, u);
    q[j] = static_cast<int8_t>(static_cast<int32_t>(l));
    if (kResidual) e[j] = v - codec::mul_rn(l, scale);
  }
}

template <typename T, bool kResidual, bool kStochastic>
void quantize(const QuantizeArgs& a) {
  cpu::for_each_range(a.numel, a.block, [&](int64_t begin, int64_t end) {
    for (int64_t b0 = begin; b0 < end; b0 += a.block)
      quantize_block<T, kResidual, kStochastic>(a, b0, std::min(a.block, end - b0));
  });
}

template <typename T, bool kAccumulate>
void dequantize(const DequantizeArgs& a) {
  cpu::for_each_range(a.numel, a.block, [&](int64_t begin, int64_t end) {
    for (int64_t b0 = begin; b0 < end; b0 += a.block) {
      const int64_t len = std::min(a.block, end - b0);
      const float scale = a.scales[b0 / a.block];
      const int8_t* __restrict q = a.q + b0;
      T* __restrict out = static_cast<T*>(a.out) + b0;
#pragma omp simd
      for (int64_t j = 0; j < len; ++j) {
        const float d = codec::mul_rn(static_cast<float>(q[j]), scale);
        out[j] = Num<T>::store(kAccumulate ? Num<T>::load(out[j]) + d : d);
      }
    }
  });
}

}  // namespace

void quantize_int8_cpu(const QuantizeArgs& a) {
  check_quantize(a, "quantize_int8");
  if (a.numel == 0) return;
  PYCOMM_DISPATCH_FLOAT(a.x_dtype, "quantize_int8", [&] {
    const bool r = a.residual != nullptr;
    if (a.stochastic) return r ? quantize<scalar_t, true, true>(a) : quantize<scalar_t, false, true>(a);
    return r ? quantize<scalar_t, true, false>(a) : quantize<scalar_t, false, false>(a);
  });
}

void dequantize_int8_cpu(const DequantizeArgs& a) {
  check_dequantize(a, "dequantize_int8");
  if (a.numel == 0) return;
  PYCOMM_DISPATCH_FLOAT(a.out_dtype, "dequantize_int8", [&] {
    return a.accumulate ? dequantize<scalar_t, true>(a) : dequantize<scalar_t, false>(a);
  });
}

}  // namespace pycomm
