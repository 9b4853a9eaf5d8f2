// The codec-independent part of the fused reduce step (kernels/reduce_encode.h), compiled per ISA like
// the kernel files that include it (see isa.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/dtype.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/parallel.h"
#include "kernels/reduce_encode.h"

namespace pycomm::cpu::PYCOMM_ISA {

// Elements of the block at b0 (len long) that belong to `own`.
inline int64_t own_in_block(const ReduceEncodeArgs& a, int64_t b0, int64_t len) {
  return std::clamp<int64_t>(a.own_numel - b0, 0, len);
}

// acc[0, len) = the block at b0: own (+ residual, then zeroed), then add_source(s, acc) for every source
// in order (acc += its decode), then times factor.
template <bool kOwnResidual, typename AddSource>
void reduce_block(const ReduceEncodeArgs& a, int64_t b0, int64_t len, float* __restrict acc, AddSource add_source) {
  const int64_t own = own_in_block(a, b0, len);
  const float* __restrict x = a.own + b0;
  float* __restrict e = kOwnResidual ? a.own_residual + b0 : nullptr;
  uint32_t spent = 0;  // any bit of the own residual set (-0.0 too): only then is it zeroed, so a residual
                       // that is already zero (every call after the first) is read but never written back
#pragma omp simd reduction(| : spent)
  for (int64_t j = 0; j < own; ++j) {
    acc[j] = kOwnResidual ? x[j] + e[j] : x[j];
    if (kOwnResidual) spent |= float_bits(e[j]);
  }
  if (kOwnResidual && spent != 0) {
#pragma omp simd
    for (int64_t j = 0; j < own; ++j) e[j] = 0.0f;
  }
  for (int64_t j = own; j < len; ++j) acc[j] = 0.0f;
  for (int64_t s = 0; s < a.sources; ++s) add_source(s, acc);
  if (a.factor != 1.0f) {
#pragma omp simd
    for (int64_t j = 0; j < len; ++j) acc[j] *= a.factor;
  }
}

// Runs reduce_block + encode_block(b0, len, acc) over every block, the blocks' v in a per-range buffer;
// with decoded_out, then decode_block(b0, n, decoded_out + b0): the block's first n (own) elements
// decoded from the encoding just written, still in cache.
template <bool kOwnResidual, typename AddSource, typename EncodeBlock, typename DecodeBlock>
void reduce_encode(const ReduceEncodeArgs& a, AddSource add_source, EncodeBlock encode_block,
                   DecodeBlock decode_block) {
  cpu::for_each_range(a.numel, a.block, [&](int64_t begin, int64_t end) {
    std::vector<float> acc(static_cast<size_t>(std::min(a.block, end - begin)));
    for (int64_t b0 = begin; b0 < end; b0 += a.block) {
      const int64_t len = std::min(a.block, end - b0);
      reduce_block<kOwnResidual>(a, b0, len, acc.data(), [&](int64_t s, float* v) { add_source(s, b0, len, v); });
      encode_block(b0, len, acc.data());
      const int64_t own = own_in_block(a, b0, len);
      if (a.decoded_out != nullptr && own > 0) decode_block(b0, own, a.decoded_out + b0);
    }
  });
}

}  // namespace pycomm::cpu::PYCOMM_ISA
