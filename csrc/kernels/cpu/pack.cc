#include "kernels/pack.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/parallel.h"

PYCOMM_ISA_DECLARE(pack_loops, pycomm::PackArgs)
PYCOMM_ISA_DECLARE(unpack_loops, pycomm::PackArgs)

namespace pycomm {

#if PYCOMM_ISA_PRIMARY
void check_pack_dtypes(const PackArgs& a, const char* what) {
  if (is_plain_copy(a)) return;
  if (!is_floating(a.tensor_dtype) || !is_floating(a.bucket_dtype))
    throw std::invalid_argument(std::string(what) + ": a cast or scale needs floating dtypes, got tensors of " +
                                dtype_name(a.tensor_dtype) + " and a bucket of " + dtype_name(a.bucket_dtype) +
                                " (integer tensors can only be packed unscaled into a bucket of the same dtype)");
}

namespace {
template <bool kPack>
void run(const PackArgs& a, const char* what) {
  check_pack_dtypes(a, what);
  if (a.segs.empty()) return;
  if (a.bucket == nullptr) throw std::invalid_argument(std::string(what) + ": bucket has a null data pointer");
  if (kPack)
    PYCOMM_ISA_CALL(pack_loops, a);
  else
    PYCOMM_ISA_CALL(unpack_loops, a);
}
}  // namespace

void pack_cpu(const PackArgs& a) { run<true>(a, "pack"); }
void unpack_cpu(const PackArgs& a) { run<false>(a, "unpack"); }
#endif

namespace cpu::PYCOMM_ISA {
namespace {

template <bool kPack>
void copy_bytes(const PackArgs& a) {
  const size_t es = dtype_size(a.tensor_dtype);
  cpu::for_each_chunk(a.segs, [&](const Segment& s, int64_t b, int64_t e) {
    char* bucket = static_cast<char*>(a.bucket) + (s.offset + b) * es;
    char* tensor = static_cast<char*>(s.ptr) + b * es;
    if (kPack)
      std::memcpy(bucket, tensor, (e - b) * es);
    else
      std::memcpy(tensor, bucket, (e - b) * es);
  });
}

template <bool kPack, typename T, typename B>
void convert(const PackArgs& a) {
  using acc = typename Num<T>::acc;
  const acc scale = static_cast<acc>(a.scale);
  cpu::for_each_chunk(a.segs, [&](const Segment& s, int64_t b, int64_t e) {
    T* __restrict t = static_cast<T*>(s.ptr);
    B* __restrict k = static_cast<B*>(a.bucket) + s.offset;
    if (kPack) {
#pragma omp simd
      for (int64_t j = b; j < e; ++j) k[j] = Num<B>::store(Num<T>::load(t[j]) * scale);
    } else {
#pragma omp simd
      for (int64_t j = b; j < e; ++j) t[j] = Num<T>::store(Num<B>::load(k[j]) * scale);
    }
  });
}

template <bool kPack>
void loops(const PackArgs& a, const char* what) {
  if (is_plain_copy(a)) return copy_bytes<kPack>(a);
  PYCOMM_DISPATCH_FLOAT(a.tensor_dtype, what, [&] {
    using T = scalar_t;
    PYCOMM_DISPATCH_FLOAT(a.bucket_dtype, what, [&] { convert<kPack, T, scalar_t>(a); });
  });
}

}  // namespace

void pack_loops(const PackArgs& a) { loops<true>(a, "pack"); }
void unpack_loops(const PackArgs& a) { loops<false>(a, "unpack"); }

}  // namespace cpu::PYCOMM_ISA
}  // namespace pycomm
