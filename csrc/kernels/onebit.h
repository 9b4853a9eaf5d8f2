// 1-bit sign compression with error feedback (1-bit SGD / 1-bit Adam): v = x + e; per block of
// `block` elements (a multiple of 8) scale = mean|v|; bit = (v >= 0), 8 per byte, element i in bit
// i % 8 of byte i / 8; e <- v - decompress. Decompress gives +scale for a set bit, -scale otherwise.
#pragma once

#include <cstdint>

#include "common/dtype.h"

namespace pycomm {

struct SignCompressArgs {
  const void* x = nullptr;  // numel elements of x_dtype (any floating type)
  DType x_dtype = DType::F32;
  int64_t numel = 0;
  int64_t block = 256;
  uint8_t* bits = nullptr;    // ceil(numel / 8) bytes
  float* scales = nullptr;    // ceil(numel / block)
  float* residual = nullptr;  // optional, fp32, numel; read as e and overwritten with the new residual
};

struct SignDecompressArgs {
  const uint8_t* bits = nullptr;
  const float* scales = nullptr;
  int64_t numel = 0;
  int64_t block = 256;
  void* out = nullptr;  // numel elements of out_dtype
  DType out_dtype = DType::F32;
  bool accumulate = false;  // out += decoded instead of out = decoded
};

inline int64_t sign_bytes(int64_t numel) { return (numel + 7) / 8; }

void check_sign_compress(const SignCompressArgs& a, const char* what);
void check_sign_decompress(const SignDecompressArgs& a, const char* what);

void sign_compress_cpu(const SignCompressArgs& a);
void sign_decompress_cpu(const SignDecompressArgs& a);

#ifdef PYCOMM_WITH_GPU
void sign_compress_gpu(const SignCompressArgs& a, int device, uintptr_t stream);
void sign_decompress_gpu(const SignDecompressArgs& a, int device, uintptr_t stream);
#endif

}  // namespace pycomm
