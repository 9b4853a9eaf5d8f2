// Element arithmetic shared by the compression kernels on both back ends. Everything here is
// branch-free (so CPU loops vectorize) and bit-identical on host and device, so the CPU and the GPU
// encode a tensor to the same bytes for the same seed.
#pragma once

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
PYCOMM_HD float floor_small(float y) {  // floor for |y| < 2^22
  const float r = round_half_even(y);
  return r > y ? r - 1.0f : r;
}
PYCOMM_HD float clamp_sym(float y, float lim) {  // NaN stays NaN
  y = y < -lim ? -lim : y;
  return y > lim ? lim : y;
}
PYCOMM_HD float zero_if_nan(float y) { return y == y ? y : 0.0f; }

// Counter-based uniform numbers: u(seed, i) in [0, 1) for element index i, a pure function of its
// arguments (no state), so any thread on any device draws the same number for the same element.
// lowbias32 by C. Wellons (public domain): a well-mixed 32-bit bijection.
PYCOMM_HD uint32_t mix32(uint32_t h) {
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  h *= 0x846ca68bu;
  h ^= h >> 16;
  return h;
}
// The key of the 2^32 elements that share the high half `hi` of their index.
PYCOMM_HD uint32_t stream_key(uint64_t seed, uint32_t hi) {
  return mix32(static_cast<uint32_t>(seed) ^ mix32(static_cast<uint32_t>(seed >> 32) ^ mix32(hi ^ 0x9e3779b9u)));
}
PYCOMM_HD float uniform_keyed(uint32_t key, uint32_t lo) {
  return static_cast<float>(mix32(lo ^ key) >> 8) * (1.0f / 16777216.0f);
}
PYCOMM_HD float uniform(uint64_t seed, int64_t i) {
  const uint64_t u = static_cast<uint64_t>(i);
  return uniform_keyed(stream_key(seed, static_cast<uint32_t>(u >> 32)), static_cast<uint32_t>(u));
}

// int8 symmetric absmax: scale = max|v| / 127 (0 for an all-zero block). `nonfinite` is the sum of
// v * 0 over the block: 0, or NaN when the block holds a NaN or an infinity, which then poisons the
// scale so that decoding gives NaN instead of a silently wrong finite value.
constexpr float kInt8Max = 127.0f;
PYCOMM_HD float int8_scale(float amax, float nonfinite) { return amax / kInt8Max + nonfinite; }
PYCOMM_HD float int8_divisor(float scale) { return scale > 0.0f ? scale : 1.0f; }  // all-zero block: q = 0
// q as a float in [-127, 127]; u = 0 rounds to nearest (even), u in [0,1) rounds stochastically.
template <bool kStochastic>
PYCOMM_HD float int8_level(float v, float divisor, float u) {
  if (kStochastic) return zero_if_nan(floor_small(clamp_sym(v / divisor + u, kInt8Max)));
  return zero_if_nan(round_half_even(clamp_sym(v / divisor, kInt8Max)));
}

// 1-bit sign: bit 1 decodes to +scale, bit 0 to -scale.
PYCOMM_HD float sign_value(bool bit, float scale) { return bit ? scale : -scale; }

}  // namespace pycomm::codec
