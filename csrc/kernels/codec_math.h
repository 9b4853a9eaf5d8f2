// Element arithmetic shared by the compression kernels on both back ends. Everything here is
// branch-free (so CPU loops vectorize) and bit-identical on host and device, so the CPU and the GPU
// encode a tensor to the same bytes for the same seed.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/dtype.h"

namespace pycomm::codec {

// a * b rounded once, never contracted into an FMA with a following add (nvcc and hipcc contract by
// default; the host build has no FMA), so residuals and decodes match across back ends.
PYCOMM_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// Round half to even for |y| < 2^22 without SSE4.1's roundps: adding 1.5 * 2^23 leaves no fraction bits.
PYCOMM_HD float round_half_even(float y) {
  const float magic = 12582912.0f;
  return (y + magic) - magic;
}
PYCOMM_HD float floor_small(float y) {  // floor for |y| < 2^22 (exact, so every variant agrees)
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__) || defined(__SSE4_1__)
  return floorf(y);  // one instruction (roundps on x86)
#else
  const float r = round_half_even(y);  // SSE2 has no vector floor
  return r > y ? r - 1.0f : r;
#endif
}
// Counter-based uniform numbers: u(seed, i) in [0, 1) for element index i, a pure function of its
// arguments (no state), so any thread on any device draws the same number for the same element.
// lowbias32 by C. Wellons (public domain): a well-mixed 32-bit bijection.
// lowbias32 without its last step (h ^= h >> 16), which only reaches the low 16 bits.
PYCOMM_HD uint32_t mix32_unfinished(uint32_t h) {
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  return h * 0x846ca68bu;
}
PYCOMM_HD uint32_t mix32(uint32_t h) {
  h = mix32_unfinished(h);
  return h ^ (h >> 16);
}
// The key of the 2^32 elements that share the high half `hi` of their index.
PYCOMM_HD uint32_t stream_key(uint64_t seed, uint32_t hi) {
  return mix32(static_cast<uint32_t>(seed) ^ mix32(static_cast<uint32_t>(seed >> 32) ^ mix32(hi ^ 0x9e3779b9u)));
}
// u takes the 24 high bits of the hash: its top 16 are lowbias32's own, the next 8 the product's
// well-mixed middle bits, so the last xorshift (2 of the ~12 vector ops per element) is skipped.
PYCOMM_HD float uniform_keyed(uint32_t key, uint32_t lo) {
  // via int32: the 24-bit value converts exactly either way, but only signed conversion vectorizes
  return static_cast<float>(static_cast<int32_t>(mix32_unfinished(lo ^ key) >> 8)) * (1.0f / 16777216.0f);
}
PYCOMM_HD float uniform(uint64_t seed, int64_t i) {
  const uint64_t u = static_cast<uint64_t>(i);
  return uniform_keyed(stream_key(seed, static_cast<uint32_t>(u >> 32)), static_cast<uint32_t>(u));
}
// uniform(seed, i) for one thread's run of indices: the stream key is recomputed only when the
// high half of i changes (once per 2^32 elements), not per element.
class UniformStream {
 public:
  PYCOMM_HD explicit UniformStream(uint64_t seed) : seed_(seed), key_(stream_key(seed, 0)) {}
  PYCOMM_HD float operator()(int64_t i) {
    const uint64_t u = static_cast<uint64_t>(i);
    const uint32_t hi = static_cast<uint32_t>(u >> 32);
    if (hi != hi_) {
      hi_ = hi;
      key_ = stream_key(seed_, hi);
    }
    return uniform_keyed(key_, static_cast<uint32_t>(u));
  }

 private:
  uint64_t seed_;
  uint32_t hi_ = 0, key_;
};

// Symmetric absmax levels in [-kMax, kMax] (int8: kMax = 127, int4: kMax = 7): scale = max|v| / kMax per
// block (0 for an all-zero block). `nonfinite` is the sum of v * 0 over the block: 0, or NaN when the block
// holds a NaN or an infinity. Such a block gets a NaN scale and level 0 (nonfinite_block), so it decodes to
// NaN, never to a wrong finite value.
constexpr int kInt8Max = 127;
constexpr int kInt4Max = 7;
template <int kMax>
PYCOMM_HD float absmax_scale(float amax, float nonfinite) {
  return amax / static_cast<float>(kMax) + nonfinite;
}
PYCOMM_HD bool nonfinite_block(float nonfinite) { return nonfinite != 0.0f; }
PYCOMM_HD float level_divisor(float scale) { return scale > 0.0f ? scale : 1.0f; }  // all-zero block: level 0
// The level in [-kMax, kMax] of v in a finite block (|v / divisor| <= kMax up to rounding); u = 0 rounds
// to nearest (even), u in [0,1) rounds stochastically. The clamp is on integers: a float clamp next to
// the int8 narrowing makes GCC select on narrowed masks, several times slower.
template <int kMax, bool kStochastic>
PYCOMM_HD int32_t absmax_level(float v, float divisor, float u) {
  const float y = kStochastic ? floor_small(v / divisor + u) : round_half_even(v / divisor);
  int32_t q = static_cast<int32_t>(y);
  q = q < -kMax ? -kMax : q;
  return q > kMax ? kMax : q;
}

// int4 storage: two levels per byte, element 2k in the low nibble of byte k and element 2k + 1 in the
// high nibble, each as a 4-bit two's complement (levels -7..7; the nibble 0x8 never occurs).
PYCOMM_HD uint8_t int4_pack(int32_t even, int32_t odd) {
  return static_cast<uint8_t>((static_cast<uint32_t>(even) & 0xFu) | ((static_cast<uint32_t>(odd) & 0xFu) << 4));
}
PYCOMM_HD int32_t int4_low(uint32_t byte) { return static_cast<int32_t>((byte & 0xFu) ^ 8u) - 8; }
PYCOMM_HD int32_t int4_high(uint32_t byte) { return static_cast<int32_t>(((byte >> 4) & 0xFu) ^ 8u) - 8; }
// The level of element i (its parity picks the nibble) stored in `byte`.
PYCOMM_HD int32_t int4_unpack(uint32_t byte, int64_t i) { return (i & 1) ? int4_high(byte) : int4_low(byte); }

// 1-bit sign: bit 1 decodes to +scale, bit 0 to -scale.
PYCOMM_HD float sign_value(bool bit, float scale) { return bit ? scale : -scale; }

}  // namespace pycomm::codec
