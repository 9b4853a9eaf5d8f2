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

PYCOMM_HD int64_t num_blocks(int64_t numel, int64_t block) { return (numel + block - 1) / block; }

// Argument checks shared by both back ends (throw std::invalid_argument naming `what`).
void check_quantize(const QuantizeArgs& a, const char* what);
void check_dequantize(const DequantizeArgs& a, const char* what);

void quantize_int8_cpu(const QuantizeArgs& a);
void dequantize_int8_cpu(const DequantizeArgs& a);

#ifdef PYCOMM_WITH_GPU
void quantize_int8_gpu(const QuantizeArgs& a, int device, uintptr_t stream);
void dequantize_int8_gpu(const DequantizeArgs& a, int device, uintptr_t stream);
#endif

}  // namespace pycomm
