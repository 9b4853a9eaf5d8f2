// int8 blockwise quantization (symmetric absmax, one fp32 scale per block of `block` elements; the
// last block may be short) with optional stochastic rounding and error feedback, and its inverse,
// plain or accumulating (the reduce step of a quantized all-reduce). Element math: codec_math.h.
#pragma once

#include <cstdint>

#include "common/dtype.h"

namespace pycomm {

struct QuantizeArgs {
  const void* x = nullptr;      // numel elements of x_dtype (any floating type)
  DType x_dtype = DType::F32;
  int64_t numel = 0;
  int64_t block = 256;
  int8_t* q = nullptr;          // numel
  float* scales = nullptr;      // ceil(numel / block)
  float* residual = nullptr;    // optional, fp32, numel: v = x + e is encoded, then e <- v - decode
  bool stochastic = false;      // q = floor(v / scale + u), u = codec::uniform(seed, index)
  uint64_t seed = 0;
};

struct DequantizeArgs {
  const int8_t* q = nullptr;
  const float* scales = nullptr;
  int64_t numel = 0;
  int64_t block = 256;
  void* out = nullptr;          // numel elements of out_dtype
  DType out_dtype = DType::F32;
  bool accumulate = false;      // out += q * scale instead of out = q * scale
};

// The reduce step of the quantized all-reduce in one pass per block (CPU): v = (own (+ own_residual)
// + sum over sources of q_s * scale_s) * factor, encoded as quantize_int8 encodes an fp32 x = v (with
// `residual`, stochastic rounding and `seed` alike). Bit-identical to copy, add, dequantize_int8
// accumulate per source in order, multiply (when factor != 1) and quantize_int8 run one after another;
// v lives only in a one-block buffer, in cache.
struct ReduceQuantizeArgs {
  const float* own = nullptr;              // own_numel fp32: this rank's exact part; v past it starts at 0
  int64_t own_numel = 0;                   // <= numel
  float* own_residual = nullptr;           // optional, own_numel: added to own, then zeroed (it is spent)
  const int8_t* const* q = nullptr;        // sources pointers to numel levels each
  const float* const* scales = nullptr;    // sources pointers to ceil(numel / block) scales each
  int64_t sources = 0;
  float factor = 1.0f;                     // 1 for SUM, 1 / size for AVG
  int64_t numel = 0;
  int64_t block = 256;
  int8_t* q_out = nullptr;                 // numel: the encoding of v
  float* scales_out = nullptr;             // ceil(numel / block)
  float* residual = nullptr;               // optional, fp32, numel: v + residual is encoded, then updated
  bool stochastic = false;
  uint64_t seed = 0;
};

PYCOMM_HD int64_t num_blocks(int64_t numel, int64_t block) { return (numel + block - 1) / block; }

// Argument checks shared by both back ends (throw std::invalid_argument naming `what`).
void check_quantize(const QuantizeArgs& a, const char* what);
void check_dequantize(const DequantizeArgs& a, const char* what);

void quantize_int8_cpu(const QuantizeArgs& a);
void dequantize_int8_cpu(const DequantizeArgs& a);
void reduce_quantize_int8_cpu(const ReduceQuantizeArgs& a);

#ifdef PYCOMM_WITH_GPU
void quantize_int8_gpu(const QuantizeArgs& a, int device, uintptr_t stream);
void dequantize_int8_gpu(const DequantizeArgs& a, int device, uintptr_t stream);
#endif

}  // namespace pycomm
