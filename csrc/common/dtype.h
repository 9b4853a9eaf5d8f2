// Element types shared by Python and C++, and bit-exact float conversions usable on host and device.
// The numeric codes are part of the Python <-> C++ contract (pycomm/_dtypes.py mirrors them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define PYCOMM_HD __host__ __device__ __forceinline__
#else
// Always inlined: the CPU kernels are compiled once per ISA (kernels/cpu/isa.h), and an out-of-line
// copy built for AVX2 must never be what the baseline code calls.
#define PYCOMM_HD inline __attribute__((always_inline))
#endif

namespace pycomm {

enum class DType : int32_t { F32 = 0, F64 = 1, F16 = 2, BF16 = 3, I8 = 4, U8 = 5, I32 = 6, I64 = 7 };

// Throws std::invalid_argument naming `what` for an unknown code.
DType dtype_from_int(int code, const char* what);
const char* dtype_name(DType t);
size_t dtype_size(DType t);
inline bool is_floating(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16; }
// The floating dtypes, as an error names what was expected.
constexpr const char* kFloatingDtypes = "float32, float64, float16 or bfloat16";
// Throws std::invalid_argument naming `what`, `got` and the expected dtypes.
[[noreturn]] void throw_bad_dtype(const char* what, DType got, const char* expected);
// Throws (throw_bad_dtype) unless `t` is a floating dtype. Out of line: no ISA variant holds a copy.
void require_floating(const char* what, DType t);

// 16-bit storage types; arithmetic always happens in float.
struct bf16_t {
  uint16_t bits;
};
struct f16_t {
  uint16_t bits;
};

PYCOMM_HD uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
PYCOMM_HD float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; NaN stays NaN (quiet). Branch-free so loops vectorize.
PYCOMM_HD uint16_t f32_to_bf16(float f) {
  uint32_t u = float_bits(f);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  return static_cast<uint16_t>(nan ? ((u >> 16) | 0x40u) : rounded);
}
PYCOMM_HD float bf16_to_f32(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

// IEEE half conversions after M. Dukhan's FP16 library (MIT): exact, round to nearest even,
// subnormals and infinities handled, no branches the compiler cannot turn into selects.
PYCOMM_HD uint16_t f32_to_f16(float f) {
  const float scale_to_inf = 0x1.0p+112f;
  const float scale_to_zero = 0x1.0p-110f;
  float base = ((f < 0 ? -f : f) * scale_to_inf) * scale_to_zero;
  const uint32_t w = float_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xff000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = bits_float((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = float_bits(base);
  const uint32_t nonsign = ((bits >> 13) & 0x00007c00u) + (bits & 0x00000fffu);
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xff000000u ? 0x7e00u : nonsign));
}
PYCOMM_HD float f16_to_f32(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  const float normalized = bits_float((two_w >> 4) + (0xe0u << 23)) * 0x1.0p-112f;
  const float denormalized = bits_float((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t mag = two_w < (1u << 27) ? float_bits(denormalized) : float_bits(normalized);
  return bits_float(sign | mag);
}

// Load/store between a storage type and its compute type (float, or double for double).
template <typename T>
struct Num;
template <>
struct Num<float> {
  using acc = float;
  static PYCOMM_HD float load(float v) { return v; }
  static PYCOMM_HD float store(float v) { return v; }
};
template <>
struct Num<double> {
  using acc = double;
  static PYCOMM_HD double load(double v) { return v; }
  static PYCOMM_HD double store(double v) { return v; }
};
template <>
struct Num<bf16_t> {
  using acc = float;
  static PYCOMM_HD float load(bf16_t v) { return bf16_to_f32(v.bits); }
  static PYCOMM_HD bf16_t store(float v) { return bf16_t{f32_to_bf16(v)}; }
};
template <>
struct Num<f16_t> {
  using acc = float;
  static PYCOMM_HD float load(f16_t v) { return f16_to_f32(v.bits); }
  static PYCOMM_HD f16_t store(float v) { return f16_t{f32_to_f16(v)}; }
};

}  // namespace pycomm

// Calls BODY with `scalar_t` bound to the storage type of a floating DType.
#define PYCOMM_DISPATCH_FLOAT(DT, WHAT, ...)                            \
  [&] {                                                                 \
    switch (DT) {                                                       \
      case ::pycomm::DType::F32: {                                      \
        using scalar_t = float;                                         \
        return __VA_ARGS__();                                           \
      }                                                                 \
      case ::pycomm::DType::F64: {                                      \
        using scalar_t = double;                                        \
        return __VA_ARGS__();                                           \
      }                                                                 \
      case ::pycomm::DType::F16: {                                      \
        using scalar_t = ::pycomm::f16_t;                               \
        return __VA_ARGS__();                                           \
      }                                                                 \
      case ::pycomm::DType::BF16: {                                     \
        using scalar_t = ::pycomm::bf16_t;                              \
        return __VA_ARGS__();                                           \
      }                                                                 \
      default:                                                          \
        ::pycomm::throw_bad_dtype(WHAT, DT, ::pycomm::kFloatingDtypes); \
    }                                                                   \
  }()
