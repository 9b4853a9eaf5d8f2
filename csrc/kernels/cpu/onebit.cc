#include "kernels/onebit.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/check.h"
#include "kernels/codec_math.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce_block.h"
#include "kernels/reduce_encode.h"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

PYCOMM_ISA_DECLARE(sign_compress, pycomm::SignCompressArgs)
PYCOMM_ISA_DECLARE(sign_decompress, pycomm::SignDecompressArgs)
PYCOMM_ISA_DECLARE(reduce_sign_compress, pycomm::ReduceEncodeArgs)

namespace pycomm {

#if PYCOMM_ISA_PRIMARY
namespace {
void check_block(int64_t block, int64_t numel, const char* what) {
  require(block >= 8 && block % 8 == 0, what,
          "block must be a positive multiple of 8 (blocks own whole bytes of bits), got " + std::to_string(block));
  require(numel >= 0, what, "numel must be >= 0");
}
}  // namespace

void check_sign_compress(const SignCompressArgs& a, const char* what) {
  check_block(a.block, a.numel, what);
  require_floating(what, a.x_dtype);
  require(a.numel == 0 || (a.x && a.bits && a.scales), what, "x, bits and scales need data pointers");
}

void check_sign_decompress(const SignDecompressArgs& a, const char* what) {
  check_block(a.block, a.numel, what);
  require_floating(what, a.out_dtype);
  require(a.numel == 0 || (a.bits && a.scales && a.out), what, "bits, scales and out need data pointers");
}

void sign_compress_cpu(const SignCompressArgs& a) {
  check_sign_compress(a, "sign_compress");
  if (a.numel > 0) PYCOMM_ISA_CALL(sign_compress, a);
}

void sign_decompress_cpu(const SignDecompressArgs& a) {
  check_sign_decompress(a, "sign_decompress");
  if (a.numel > 0) PYCOMM_ISA_CALL(sign_decompress, a);
}

void reduce_sign_compress_cpu(const ReduceEncodeArgs& a) {
  check_block(a.block, a.numel, "reduce_sign_compress");
  check_reduce_encode(a, "reduce_sign_compress");
  if (a.numel > 0) PYCOMM_ISA_CALL(reduce_sign_compress, a);
}
#endif

namespace cpu::PYCOMM_ISA {
namespace {

constexpr int kLanes = 16;       // partial sums of the block's sum |v|
constexpr int64_t kStage = 256;  // elements of v staged on the stack per step (a multiple of 8)
// Bit masks as data: SSE2 has no per-lane variable shift, so `1 << b` would keep the loop scalar.
alignas(32) constexpr uint32_t kBit[8] = {1, 2, 4, 8, 16, 32, 64, 128};

// One block of len elements (x, e, bits at its start; it starts on a byte); its scale to *scale_out.
template <typename T, bool kResidual>
void compress_block(const T* __restrict x, float* __restrict e, uint8_t* __restrict bits, float* scale_out,
                    int64_t len) {
  // sum |v| in kLanes fixed partial sums combined in a fixed order, so every vector width (and
  // ISA variant) adds in the same order and gets the same scale.
  float part[kLanes] = {};
  int64_t j0 = 0;
  for (; j0 + kLanes <= len; j0 += kLanes) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) {
      float v = Num<T>::load(x[j0 + l]);
      if (kResidual) v += e[j0 + l];
      part[l] += v < 0.0f ? -v : v;
    }
  }
  for (int l = 0; j0 + l < len; ++l) {
    float v = Num<T>::load(x[j0 + l]);
    if (kResidual) v += e[j0 + l];
    part[l] += v < 0.0f ? -v : v;
  }
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) part[l] += part[l + w];
  const float scale = part[0] / static_cast<float>(len);
  *scale_out = scale;

  // Stage v in a zero-padded buffer so the bit packing always sees whole bytes.
  alignas(64) float v[kStage];
  for (int64_t s0 = 0; s0 < len; s0 += kStage) {
    const int64_t n = std::min(kStage, len - s0);
    const int64_t padded = (n + 7) & ~int64_t(7);
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      float vj = Num<T>::load(x[s0 + j]);
      if (kResidual) vj += e[s0 + j];
      v[j] = vj;
    }
    for (int64_t j = n; j < padded; ++j) v[j] = -1.0f;  // padding bits are 0
    if (kResidual) {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) e[s0 + j] = v[j] - codec::sign_value(v[j] >= 0.0f, scale);
    }
    for (int64_t k = 0; k < padded / 8; ++k) {
#if defined(__AVX2__)
      // one compare and movemask per byte: lane b's (v >= 0) (ordered: NaN gives 0) lands in bit b
      const __m256 ge = _mm256_cmp_ps(_mm256_load_ps(v + 8 * k), _mm256_setzero_ps(), _CMP_GE_OQ);
      bits[s0 / 8 + k] = static_cast<uint8_t>(_mm256_movemask_ps(ge));
#else
      uint32_t byte = 0;
      for (int b = 0; b < 8; ++b) byte |= static_cast<uint32_t>(v[8 * k + b] >= 0.0f) << b;
      bits[s0 / 8 + k] = static_cast<uint8_t>(byte);
#endif
    }
  }
}

template <typename T, bool kResidual>
void compress(const SignCompressArgs& a) {
  cpu::for_each_range(a.numel, a.block, [&](int64_t begin, int64_t end) {
    for (int64_t b0 = begin; b0 < end; b0 += a.block)
      compress_block<T, kResidual>(static_cast<const T*>(a.x) + b0, kResidual ? a.residual + b0 : nullptr,
                                   a.bits + b0 / 8, a.scales + b0 / a.block, std::min(a.block, end - b0));
  });
}

// out[0, len) = (or +=) the decode of one block's sign bits (starting on a byte) with its scale.
template <typename T, bool kAccumulate>
void decompress_block(const uint8_t* __restrict bits, float scale, T* __restrict out, int64_t len) {
  const int64_t whole = len / 8;
  for (int64_t k = 0; k < whole; ++k) {
    const uint32_t byte = bits[k];
    T* __restrict o = out + 8 * k;
#pragma omp simd
    for (int b = 0; b < 8; ++b) {
      const float d = codec::sign_value((byte & kBit[b]) != 0, scale);
      o[b] = Num<T>::store(kAccumulate ? Num<T>::load(o[b]) + d : d);
    }
  }
  for (int64_t j = whole * 8; j < len; ++j) {
    const float d = codec::sign_value((bits[j / 8] >> (j % 8)) & 1u, scale);
    out[j] = Num<T>::store(kAccumulate ? Num<T>::load(out[j]) + d : d);
  }
}

template <typename T, bool kAccumulate>
void decompress(const SignDecompressArgs& a) {
  cpu::for_each_range(a.numel, a.block, [&](int64_t begin, int64_t end) {
    for (int64_t b0 = begin; b0 < end; b0 += a.block)
      decompress_block<T, kAccumulate>(a.bits + b0 / 8, a.scales[b0 / a.block], static_cast<T*>(a.out) + b0,
                                       std::min(a.block, end - b0));
  });
}

template <bool kOwnResidual, bool kResidual>
void reduce_compress(const ReduceEncodeArgs& a) {
  auto add_source = [&](int64_t s, int64_t b0, int64_t len, float* __restrict acc) {
    const uint8_t* __restrict bits = static_cast<const uint8_t*>(a.data[s]) + b0 / 8;
    const float scale = a.scales[s][b0 / a.block];
    const int64_t whole = len / 8;
    for (int64_t k = 0; k < whole; ++k) {
      const uint32_t byte = bits[k];
#pragma omp simd
      for (int b = 0; b < 8; ++b) acc[8 * k + b] += codec::sign_value((byte & kBit[b]) != 0, scale);
    }
    for (int64_t j = whole * 8; j < len; ++j) acc[j] += codec::sign_value((bits[j / 8] >> (j % 8)) & 1u, scale);
  };
  auto encode_block = [&](int64_t b0, int64_t len, const float* acc) {
    compress_block<float, kResidual>(acc, kResidual ? a.residual + b0 : nullptr,
                                     static_cast<uint8_t*>(a.data_out) + b0 / 8, a.scales_out + b0 / a.block, len);
  };
  auto decode_block = [&](int64_t b0, int64_t n, float* out) {
    decompress_block<float, false>(static_cast<const uint8_t*>(a.data_out) + b0 / 8, a.scales_out[b0 / a.block], out,
                                   n);
  };
  reduce_encode<kOwnResidual>(a, add_source, encode_block, decode_block);
}

}  // namespace

void reduce_sign_compress(const ReduceEncodeArgs& a) {
  const bool own = a.own_residual != nullptr && a.own_numel > 0, r = a.residual != nullptr;
  if (own) return r ? reduce_compress<true, true>(a) : reduce_compress<true, false>(a);
  return r ? reduce_compress<false, true>(a) : reduce_compress<false, false>(a);
}

void sign_compress(const SignCompressArgs& a) {
  PYCOMM_DISPATCH_FLOAT(a.x_dtype, "sign_compress",
                        [&] { return a.residual ? compress<scalar_t, true>(a) : compress<scalar_t, false>(a); });
}

void sign_decompress(const SignDecompressArgs& a) {
  PYCOMM_DISPATCH_FLOAT(a.out_dtype, "sign_decompress",
                        [&] { return a.accumulate ? decompress<scalar_t, true>(a) : decompress<scalar_t, false>(a); });
}

}  // namespace cpu::PYCOMM_ISA
}  // namespace pycomm
