// Blockwise symmetric absmax quantization, int8 and int4: one fp32 scale = max|v| / kMax per block of
// `block` elements (the last may be short), levels round(v / scale) in [-kMax, kMax] (kMax 127 / 7), with
// optional stochastic rounding and error feedback, and its inverse, plain or accumulating (the reduce step
// of a quantized all-reduce). int8 stores a level per byte; int4 two per byte, so its blocks are even.
// Element math and the int4 nibble layout: codec_math.h; the storage of each format: Int8Levels and
// Int4Levels below, over which both back ends write their kernels once.
#pragma once

#include <cstdint>

#include "common/dtype.h"
#include "kernels/codec_math.h"

namespace pycomm {

template <typename Data>
struct AbsmaxQuantizeArgs {
  const void* x = nullptr;  // numel elements of x_dtype (any floating type)
  DType x_dtype = DType::F32;
  int64_t numel = 0;
  int64_t block = 256;
  Data* q = nullptr;          // the levels: numel bytes (int8), ceil(numel / 2) bytes (int4)
  float* scales = nullptr;    // ceil(numel / block)
  float* residual = nullptr;  // optional, fp32, numel: v = x + e is encoded, then e <- v - decode
  bool stochastic = false;    // level = floor(v / scale + u), u = codec::uniform(seed, index)
  uint64_t seed = 0;
};

template <typename Data>
struct AbsmaxDequantizeArgs {
  const Data* q = nullptr;
  const float* scales = nullptr;
  int64_t numel = 0;
  int64_t block = 256;
  void* out = nullptr;  // numel elements of out_dtype
  DType out_dtype = DType::F32;
  bool accumulate = false;  // out += level * scale instead of out = level * scale
};

using QuantizeArgs = AbsmaxQuantizeArgs<int8_t>;
using DequantizeArgs = AbsmaxDequantizeArgs<int8_t>;
using Int4QuantizeArgs = AbsmaxQuantizeArgs<uint8_t>;
using Int4DequantizeArgs = AbsmaxDequantizeArgs<uint8_t>;

// How a format stores its levels: element i lives in unit i / kGroup of the data.
struct Int8Levels {
  using Data = int8_t;
  static constexpr int kMax = codec::kInt8Max;
  static constexpr int kGroup = 1;  // elements per stored unit (a byte)
  PYCOMM_HD static int32_t get(const Data* q, int64_t i) { return q[i]; }
  PYCOMM_HD static Data put(const int32_t* levels) { return static_cast<int8_t>(levels[0]); }
};
struct Int4Levels {
  using Data = uint8_t;
  static constexpr int kMax = codec::kInt4Max;
  static constexpr int kGroup = 2;
  PYCOMM_HD static int32_t get(const Data* q, int64_t i) { return codec::int4_unpack(q[i / 2], i); }
  PYCOMM_HD static Data put(const int32_t* levels) { return codec::int4_pack(levels[0], levels[1]); }
};

PYCOMM_HD int64_t num_blocks(int64_t numel, int64_t block) { return (numel + block - 1) / block; }

// Argument checks shared by both back ends (throw std::invalid_argument naming `what`; int4's block must
// be even).
template <typename Data>
void check_quantize(const AbsmaxQuantizeArgs<Data>& a, const char* what);
template <typename Data>
void check_dequantize(const AbsmaxDequantizeArgs<Data>& a, const char* what);

void quantize_int8_cpu(const QuantizeArgs& a);
void dequantize_int8_cpu(const DequantizeArgs& a);
void quantize_int4_cpu(const Int4QuantizeArgs& a);
void dequantize_int4_cpu(const Int4DequantizeArgs& a);

#ifdef PYCOMM_WITH_GPU
void quantize_int8_gpu(const QuantizeArgs& a, int device, uintptr_t stream);
void dequantize_int8_gpu(const DequantizeArgs& a, int device, uintptr_t stream);
void quantize_int4_gpu(const Int4QuantizeArgs& a, int device, uintptr_t stream);
void dequantize_int4_gpu(const Int4DequantizeArgs& a, int device, uintptr_t stream);
#endif

}  // namespace pycomm
