#include "kernels/quantize.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/check.h"
#include "kernels/codec_math.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce_block.h"
#include "kernels/flags.h"
#include "kernels/reduce_encode.h"

PYCOMM_ISA_DECLARE(quantize_int8, pycomm::QuantizeArgs)
PYCOMM_ISA_DECLARE(dequantize_int8, pycomm::DequantizeArgs)
PYCOMM_ISA_DECLARE(reduce_quantize_int8, pycomm::ReduceEncodeArgs)
PYCOMM_ISA_DECLARE(quantize_int4, pycomm::Int4QuantizeArgs)
PYCOMM_ISA_DECLARE(dequantize_int4, pycomm::Int4DequantizeArgs)
PYCOMM_ISA_DECLARE(reduce_quantize_int4, pycomm::ReduceEncodeArgs)

namespace pycomm {

#if PYCOMM_ISA_PRIMARY
namespace {
// int8 blocks may have any size; int4 blocks own whole bytes of two levels.
template <typename Data>
void check_block(int64_t block, int64_t numel, const char* what) {
  if constexpr (std::is_same_v<Data, uint8_t>)
    require(
        block >= 2 && block % 2 == 0, what,
        "block must be a positive even number (blocks own whole bytes of two levels), got " + std::to_string(block));
  require(block >= 1, what, "block must be >= 1, got " + std::to_string(block));
  require(numel >= 0, what, "numel must be >= 0");
}
}  // namespace

template <typename Data>
void check_quantize(const AbsmaxQuantizeArgs<Data>& a, const char* what) {
  check_block<Data>(a.block, a.numel, what);
  require_floating(what, a.x_dtype);
  require(a.numel == 0 || (a.x && a.q && a.scales), what, "x, q and scales need data pointers");
}

template <typename Data>
void check_dequantize(const AbsmaxDequantizeArgs<Data>& a, const char* what) {
  check_block<Data>(a.block, a.numel, what);
  require_floating(what, a.out_dtype);
  require(a.numel == 0 || (a.q && a.scales && a.out), what, "q, scales and out need data pointers");
}

template void check_quantize(const QuantizeArgs&, const char*);
template void check_quantize(const Int4QuantizeArgs&, const char*);
template void check_dequantize(const DequantizeArgs&, const char*);
template void check_dequantize(const Int4DequantizeArgs&, const char*);

void quantize_int8_cpu(const QuantizeArgs& a) {
  check_quantize(a, "quantize_int8");
  if (a.numel > 0) PYCOMM_ISA_CALL(quantize_int8, a);
}

void dequantize_int8_cpu(const DequantizeArgs& a) {
  check_dequantize(a, "dequantize_int8");
  if (a.numel > 0) PYCOMM_ISA_CALL(dequantize_int8, a);
}

void quantize_int4_cpu(const Int4QuantizeArgs& a) {
  check_quantize(a, "quantize_int4");
  if (a.numel > 0) PYCOMM_ISA_CALL(quantize_int4, a);
}

void dequantize_int4_cpu(const Int4DequantizeArgs& a) {
  check_dequantize(a, "dequantize_int4");
  if (a.numel > 0) PYCOMM_ISA_CALL(dequantize_int4, a);
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

void reduce_quantize_int4_cpu(const ReduceEncodeArgs& a) {
  check_block<uint8_t>(a.block, a.numel, "reduce_quantize_int4");
  check_reduce_encode(a, "reduce_quantize_int4");
  if (a.numel > 0) PYCOMM_ISA_CALL(reduce_quantize_int4, a);
}
#endif

namespace cpu::PYCOMM_ISA {
namespace {

constexpr int32_t kNonfiniteBits = 0x7f800000;  // |v|'s bits from here up: an infinity or a NaN
constexpr uint32_t kStage = 256;                // int4: levels staged per pass (even)

// One block of len elements at tensor index b0, a multiple of L::kGroup (x and e point at its start, q at
// its first unit): scale pass, then the encode pass (the block is in L1 by then); its scale goes to
// *scale_out.
template <typename L, typename T, bool kResidual, bool kStochastic>
void quantize_block(const T* __restrict x, float* __restrict e, typename L::Data* __restrict q, float* scale_out,
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
  const float scale = codec::absmax_scale<L::kMax>(finite ? bits_float(amax_bits) : 0.0f, nonfinite);
  const float div = codec::level_divisor(scale);
  *scale_out = scale;

  auto level = [&](int64_t j, float u) {
    float v = Num<T>::load(x[j]);
    if (kResidual) v += e[j];
    const int32_t l = codec::absmax_level<L::kMax, kStochastic>(v, div, u);
    if (kResidual) e[j] = v - codec::mul_rn(static_cast<float>(l), scale);
    return l;
  };
  constexpr int G = L::kGroup;
  if (codec::nonfinite_block(nonfinite)) {  // NaN scale: levels 0, residual NaN
    const int32_t zeros[G] = {};
    for (int64_t j = 0; j < len; j += G) q[j / G] = L::put(zeros);
    if (kResidual)
      for (int64_t j = 0; j < len; ++j) e[j] = Num<T>::load(x[j]) + e[j] - scale;
    return;
  }
  // Spans within one 2^32-element random stream (the key depends on the index's high half; a block
  // spans one unless it straddles a multiple of 2^32), walked with a 32-bit counter: a 64-bit one
  // costs GCC a vector of 64-bit lanes to narrow per element. Spans start on a unit (b0 and 2^32 are
  // multiples of G); only the tensor's last one may end inside a unit (int4, odd numel).
  for (int64_t j0 = 0; j0 < len;) {
    const uint64_t i0 = static_cast<uint64_t>(b0 + j0);
    const uint32_t lo = static_cast<uint32_t>(i0);
    const int64_t to_stream_end = static_cast<int64_t>((uint64_t{1} << 32) - lo);
    const uint32_t n = static_cast<uint32_t>(std::min({len - j0, to_stream_end, int64_t{1} << 31}));
    const uint32_t key = kStochastic ? codec::stream_key(seed, static_cast<uint32_t>(i0 >> 32)) : 0;
    auto u = [&](uint32_t k) { return kStochastic ? codec::uniform_keyed(key, lo + k) : 0.0f; };
    if constexpr (G == 1) {
#pragma omp simd
      for (uint32_t k = 0; k < n; ++k) q[j0 + k] = static_cast<int8_t>(level(j0 + k, u(k)));
    } else {  // levels staged as bytes (the element loop vectorizes as int8's does), then packed in pairs
      int8_t staged[kStage];
      for (uint32_t s0 = 0; s0 < n; s0 += kStage) {
        const uint32_t m = std::min<uint32_t>(kStage, n - s0);
#pragma omp simd
        for (uint32_t k = 0; k < m; ++k) staged[k] = static_cast<int8_t>(level(j0 + s0 + k, u(s0 + k)));
        typename L::Data* __restrict qs = q + (j0 + s0) / 2;
#pragma omp simd
        for (uint32_t k = 0; k < m / 2; ++k) qs[k] = codec::int4_pack(staged[2 * k], staged[2 * k + 1]);
        if (m % 2) qs[m / 2] = codec::int4_pack(staged[m - 1], 0);  // odd: the tensor's last element
      }
    }
    j0 += n;
  }
}

template <typename L, typename T, bool kResidual, bool kStochastic>
void quantize(const AbsmaxQuantizeArgs<typename L::Data>& a) {
  cpu::for_each_range(a.numel, a.block, [&](int64_t begin, int64_t end) {
    for (int64_t b0 = begin; b0 < end; b0 += a.block)
      quantize_block<L, T, kResidual, kStochastic>(static_cast<const T*>(a.x) + b0,
                                                   kResidual ? a.residual + b0 : nullptr, a.q + b0 / L::kGroup,
                                                   a.scales + b0 / a.block, a.seed, b0, std::min(a.block, end - b0));
  });
}

// out[0, len) = (or +=) the decode of one block's levels q (q at the block's first unit) with its scale.
template <typename L, typename T, bool kAccumulate>
void dequantize_block(const typename L::Data* __restrict q, float scale, T* __restrict out, int64_t len) {
  auto decode = [&](int64_t j, int32_t level) {
    const float d = codec::mul_rn(static_cast<float>(level), scale);
    out[j] = Num<T>::store(kAccumulate ? Num<T>::load(out[j]) + d : d);
  };
  if constexpr (L::kGroup == 1) {
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) decode(j, q[j]);
  } else {  // a byte's two nibbles with constant shifts (a per-lane variable shift keeps SSE2 scalar)
#pragma omp simd
    for (int64_t k = 0; k < len / 2; ++k) {
      decode(2 * k, codec::int4_low(q[k]));
      decode(2 * k + 1, codec::int4_high(q[k]));
    }
    if (len % 2) decode(len - 1, codec::int4_low(q[len / 2]));
  }
}

template <typename L, typename T, bool kAccumulate>
void dequantize(const AbsmaxDequantizeArgs<typename L::Data>& a) {
  cpu::for_each_range(a.numel, a.block, [&](int64_t begin, int64_t end) {
    for (int64_t b0 = begin; b0 < end; b0 += a.block)
      dequantize_block<L, T, kAccumulate>(a.q + b0 / L::kGroup, a.scales[b0 / a.block], static_cast<T*>(a.out) + b0,
                                          std::min(a.block, end - b0));
  });
}

template <typename L, bool kOwnResidual, bool kResidual, bool kStochastic>
void reduce_quantize(const ReduceEncodeArgs& a) {
  using Data = typename L::Data;
  auto add_source = [&](int64_t s, int64_t b0, int64_t len, float* acc) {
    dequantize_block<L, float, true>(static_cast<const Data*>(a.data[s]) + b0 / L::kGroup, a.scales[s][b0 / a.block],
                                     acc, len);
  };
  auto encode_block = [&](int64_t b0, int64_t len, const float* acc) {
    quantize_block<L, float, kResidual, kStochastic>(acc, kResidual ? a.residual + b0 : nullptr,
                                                     static_cast<Data*>(a.data_out) + b0 / L::kGroup,
                                                     a.scales_out + b0 / a.block, a.seed, b0, len);
  };
  auto decode_block = [&](int64_t b0, int64_t n, float* out) {
    dequantize_block<L, float, false>(static_cast<const Data*>(a.data_out) + b0 / L::kGroup, a.scales_out[b0 / a.block],
                                      out, n);
  };
  reduce_encode<kOwnResidual>(a, add_source, encode_block, decode_block);
}

template <typename L>
void reduce_quantize_flags(const ReduceEncodeArgs& a) {
  with_flags(
      [&](auto own_residual, auto residual, auto stochastic) {
        reduce_quantize<L, decltype(own_residual)::value, decltype(residual)::value, decltype(stochastic)::value>(a);
      },
      a.own_residual != nullptr && a.own_numel > 0, a.residual != nullptr, a.stochastic);
}

template <typename L>
void quantize_flags(const AbsmaxQuantizeArgs<typename L::Data>& a, const char* what) {
  PYCOMM_DISPATCH_FLOAT(a.x_dtype, what, [&] {
    with_flags(
        [&](auto residual, auto stochastic) {
          quantize<L, scalar_t, decltype(residual)::value, decltype(stochastic)::value>(a);
        },
        a.residual != nullptr, a.stochastic);
  });
}

template <typename L>
void dequantize_flags(const AbsmaxDequantizeArgs<typename L::Data>& a, const char* what) {
  PYCOMM_DISPATCH_FLOAT(a.out_dtype, what, [&] {
    return a.accumulate ? dequantize<L, scalar_t, true>(a) : dequantize<L, scalar_t, false>(a);
  });
}

}  // namespace

void reduce_quantize_int8(const ReduceEncodeArgs& a) { reduce_quantize_flags<Int8Levels>(a); }
void reduce_quantize_int4(const ReduceEncodeArgs& a) { reduce_quantize_flags<Int4Levels>(a); }
void quantize_int8(const QuantizeArgs& a) { quantize_flags<Int8Levels>(a, "quantize_int8"); }
void quantize_int4(const Int4QuantizeArgs& a) { quantize_flags<Int4Levels>(a, "quantize_int4"); }
void dequantize_int8(const DequantizeArgs& a) { dequantize_flags<Int8Levels>(a, "dequantize_int8"); }
void dequantize_int4(const Int4DequantizeArgs& a) { dequantize_flags<Int4Levels>(a, "dequantize_int4"); }

}  // namespace cpu::PYCOMM_ISA
}  // namespace pycomm
