#include "kernels/quantize.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/check.h"
#include "kernels/codec_math.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce_block.h"
#include "kernels/reduce_encode.h"

PYCOMM_ISA_DECLARE(quantize_int8, pycomm::QuantizeArgs)
PYCOMM_ISA_DECLARE(dequantize_int8, pycomm::DequantizeArgs)
PYCOMM_ISA_DECLARE(reduce_quantize_int8, pycomm::ReduceEncodeArgs)

namespace pycomm {

#if PYCOMM_ISA_PRIMARY
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

void quantize_int8_cpu(const QuantizeArgs& a) {
  check_quantize(a, "quantize_int8");
  if (a.numel > 0) PYCOMM_ISA_CALL(quantize_int8, a);
}

void dequantize_int8_cpu(const DequantizeArgs& a) {
  check_dequantize(a, "dequantize_int8");
  if (a.numel > 0) PYCOMM_ISA_CALL(dequantize_int8, a);
}

void check_reduce_encode(const ReduceEncodeArgs& a, const char* what) {
  require(a.block >= 1, what, "block must be >= 1, got " + std::to_string(a.block));
  require(a.numel >= 0, what, "numel must be >= 0");
  require(a.own_numel >= 0 && a.own_numel <= a.numel, what,
          "own_numel must be in [0, numel], got " + std::to_string(a.own_numel));
  require(a.own_numel == 0 || a.own, what, "own needs a data pointer");
  require(a.numel == 0 || (a.data_out && a.scales_out), what, "the output data and scales need pointers");
  require(a.sources >= 0 && (a.sources == 0 || (a.data && a.scales)), what, "sources need data and scales pointers");
  for (int64_t s = 0; s < a.sources && a.numel > 0; ++s)
    require(a.data[s] && a.scales[s], what, "source " + std::to_string(s) + " has a null data or scales pointer");
}

void reduce_quantize_int8_cpu(const ReduceEncodeArgs& a) {
  check_reduce_encode(a, "reduce_quantize_int8");
  if (a.numel > 0) PYCOMM_ISA_CALL(reduce_quantize_int8, a);
}
#endif

namespace cpu::PYCOMM_ISA {
namespace {

constexpr int32_t kNonfiniteBits = 0x7f800000;  // |v|'s bits from here up: an infinity or a NaN

// One block of len elements at tensor index b0 (x, e and q point at its start): amax pass, then the
// encode pass (the block is in L1 by then); its scale goes to *scale_out.
template <typename T, bool kResidual, bool kStochastic>
void quantize_block(const T* __restrict x, float* __restrict e, int8_t* __restrict q, float* scale_out,
                    uint64_t seed, int64_t b0, int64_t len) {
  // max |v| as an integer max over |v|'s bits (for floats >= 0, integer order is float order): one op
  // per vector finds both the absmax and any NaN or infinity, where a float max plus a v * 0 sum
  // (the GPU's way, same scale) costs the stochastic kernel ~10% of its time.
  int32_t amax_bits = 0;
#pragma omp simd reduction(max : amax_bits)
  for (int64_t j = 0; j < len; ++j) {
    float v = Num<T>::load(x[j]);
    if (kResidual) v += e[j];
    const int32_t m = static_cast<int32_t>(float_bits(v) & 0x7fffffffu);
    amax_bits = m > amax_bits ? m : amax_bits;
  }
  const bool finite = amax_bits < kNonfiniteBits;
  const float nonfinite = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();  // codec_math.h's contract
  const float scale = codec::int8_scale(finite ? bits_float(amax_bits) : 0.0f, nonfinite);
  const float div = codec::int8_divisor(scale);
  *scale_out = scale;

  auto encode = [&](int64_t j, float u) {
    float v = Num<T>::load(x[j]);
    if (kResidual) v += e[j];
    const int32_t l = codec::int8_level<kStochastic>(v, div, u);
    q[j] = static_cast<int8_t>(l);
    if (kResidual) e[j] = v - codec::mul_rn(static_cast<float>(l), scale);
  };
  if (codec::int8_nonfinite_block(nonfinite)) {  // NaN scale: q = 0, residual NaN
    for (int64_t j = 0; j < len; ++j) {
      q[j] = 0;
      if (kResidual) e[j] = Num<T>::load(x[j]) + e[j] - scale;
    }
    return;
  }
  // Spans within one 2^32-element random stream (the key depends on the index's high half; a block
  // spans one unless it straddles a multiple of 2^32), walked with a 32-bit counter: a 64-bit one
  // costs GCC a vector of 64-bit lanes to narrow per element.
  for (int64_t j0 = 0; j0 < len;) {
    const uint64_t i0 = static_cast<uint64_t>(b0 + j0);
    const uint32_t lo = static_cast<uint32_t>(i0);
    const int64_t to_stream_end = static_cast<int64_t>((uint64_t{1} << 32) - lo);
    const uint32_t n = static_cast<uint32_t>(std::min({len - j0, to_stream_end, int64_t{1} << 31}));
    const uint32_t key = kStochastic ? codec::stream_key(seed, static_cast<uint32_t>(i0 >> 32)) : 0;
#pragma omp simd
    for (uint32_t k = 0; k < n; ++k) encode(j0 + k, kStochastic ? codec::uniform_keyed(key, lo + k) : 0.0f);
    j0 += n;
  }
}

template <typename T, bool kResidual, bool kStochastic>
void quantize(const QuantizeArgs& a) {
  cpu::for_each_range(a.numel, a.block, [&](int64_t begin, int64_t end) {
    for (int64_t b0 = begin; b0 < end; b0 += a.block)
      quantize_block<T, kResidual, kStochastic>(static_cast<const T*>(a.x) + b0, kResidual ? a.residual + b0 : nullptr,
                                                a.q + b0, a.scales + b0 / a.block, a.seed, b0,
                                                std::min(a.block, end - b0));
  });
}

// out[0, len) = (or +=) the decode of one block's levels q with its scale.
template <typename T, bool kAccumulate>
void dequantize_block(const int8_t* __restrict q, float scale, T* __restrict out, int64_t len) {
#pragma omp simd
  for (int64_t j = 0; j < len; ++j) {
    const float d = codec::mul_rn(static_cast<float>(q[j]), scale);
    out[j] = Num<T>::store(kAccumulate ? Num<T>::load(out[j]) + d : d);
  }
}

template <typename T, bool kAccumulate>
void dequantize(const DequantizeArgs& a) {
  cpu::for_each_range(a.numel, a.block, [&](int64_t begin, int64_t end) {
    for (int64_t b0 = begin; b0 < end; b0 += a.block)
      dequantize_block<T, kAccumulate>(a.q + b0, a.scales[b0 / a.block], static_cast<T*>(a.out) + b0,
                                       std::min(a.block, end - b0));
  });
}

template <bool kOwnResidual, bool kResidual, bool kStochastic>
void reduce_quantize(const ReduceEncodeArgs& a) {
  auto add_source = [&](int64_t s, int64_t b0, int64_t len, float* __restrict acc) {
    const int8_t* __restrict q = static_cast<const int8_t*>(a.data[s]) + b0;
    const float scale = a.scales[s][b0 / a.block];
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) acc[j] += codec::mul_rn(static_cast<float>(q[j]), scale);
  };
  auto encode_block = [&](int64_t b0, int64_t len, const float* acc) {
    quantize_block<float, kResidual, kStochastic>(acc, kResidual ? a.residual + b0 : nullptr,
                                                  static_cast<int8_t*>(a.data_out) + b0, a.scales_out + b0 / a.block,
                                                  a.seed, b0, len);
  };
  auto decode_block = [&](int64_t b0, int64_t n, float* out) {
    dequantize_block<float, false>(static_cast<const int8_t*>(a.data_out) + b0, a.scales_out[b0 / a.block], out, n);
  };
  reduce_encode<kOwnResidual>(a, add_source, encode_block, decode_block);
}

template <bool kOwnResidual>
void reduce_quantize_dispatch(const ReduceEncodeArgs& a) {
  const bool r = a.residual != nullptr;
  if (a.stochastic)
    return r ? reduce_quantize<kOwnResidual, true, true>(a) : reduce_quantize<kOwnResidual, false, true>(a);
  return r ? reduce_quantize<kOwnResidual, true, false>(a) : reduce_quantize<kOwnResidual, false, false>(a);
}

}  // namespace

void reduce_quantize_int8(const ReduceEncodeArgs& a) {
  return a.own_residual != nullptr && a.own_numel > 0 ? reduce_quantize_dispatch<true>(a)
                                                      : reduce_quantize_dispatch<false>(a);
}

void quantize_int8(const QuantizeArgs& a) {
  PYCOMM_DISPATCH_FLOAT(a.x_dtype, "quantize_int8", [&] {
    const bool r = a.residual != nullptr;
    if (a.stochastic) return r ? quantize<scalar_t, true, true>(a) : quantize<scalar_t, false, true>(a);
    return r ? quantize<scalar_t, true, false>(a) : quantize<scalar_t, false, false>(a);
  });
}

void dequantize_int8(const DequantizeArgs& a) {
  PYCOMM_DISPATCH_FLOAT(a.out_dtype, "dequantize_int8", [&] {
    return a.accumulate ? dequantize<scalar_t, true>(a) : dequantize<scalar_t, false>(a);
  });
}

}  // namespace cpu::PYCOMM_ISA
}  // namespace pycomm
