// The reduce step of a quantized all-reduce in one pass per block (CPU), for each codec (int8, int4, 1-bit):
// the reduced chunk v = (own (+ own_residual) + the sum over sources of their decodes) * factor is encoded as
// the codec's encoder encodes an fp32 x = v (with `residual`, and for int8/int4 stochastic rounding and `seed`).
// Bit-identical to copy, add, decode-accumulate per source in order, multiply (when factor != 1) and
// encode run one after another; v lives only in a one-block buffer, in cache.
#pragma once

#include <cstdint>

namespace pycomm {

struct ReduceEncodeArgs {
  const float* own = nullptr;            // own_numel fp32: this rank's exact part; v past it starts at 0
  int64_t own_numel = 0;                 // <= numel
  float* own_residual = nullptr;         // optional, own_numel: added to own, then zeroed (it is spent)
  const void* const* data = nullptr;     // sources pointers to the codec's data of numel elements each
  const float* const* scales = nullptr;  // sources pointers to ceil(numel / block) scales each
  int64_t sources = 0;
  float factor = 1.0f;  // 1 for SUM, 1 / size for AVG
  int64_t numel = 0;
  int64_t block = 256;
  void* data_out = nullptr;     // the encoding of v: int8 levels, packed int4 levels or sign bits
  float* scales_out = nullptr;  // ceil(numel / block)
  float* residual = nullptr;    // optional, fp32, numel: v + residual is encoded, then updated
  bool stochastic = false;      // int8 and int4
  uint64_t seed = 0;
  float* decoded_out = nullptr;  // optional, own_numel fp32 (may be `own` itself): the decode of the
                                 // encoding of v's first own_numel elements, what the all-gather
                                 // hands back for them; written from the block in cache (no pass)
};

// Checks what both codecs share (throws std::invalid_argument naming `what`).
void check_reduce_encode(const ReduceEncodeArgs& a, const char* what);

void reduce_quantize_int8_cpu(const ReduceEncodeArgs& a);
void reduce_sign_compress_cpu(const ReduceEncodeArgs& a);
void reduce_quantize_int4_cpu(const ReduceEncodeArgs& a);

}  // namespace pycomm
