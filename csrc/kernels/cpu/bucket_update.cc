#include "kernels/bucket_update.h"

#include "kernels/check.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/parallel.h"

PYCOMM_ISA_DECLARE(bucket_update, pycomm::BucketUpdateArgs)

namespace pycomm {

#if PYCOMM_ISA_PRIMARY
void check_bucket_update(const BucketUpdateArgs& a, const char* what) {
  require_floating(what, a.tensor_dtype);
  require_floating(what, a.bucket_dtype);
  require(a.segs.empty() || a.y != nullptr, what, "the bucket has a null data pointer");
}

void bucket_update_cpu(const BucketUpdateArgs& a) {
  check_bucket_update(a, "bucket_update");
  if (!a.segs.empty()) PYCOMM_ISA_CALL(bucket_update, a);
}
#endif

namespace cpu::PYCOMM_ISA {
namespace {

template <typename T, typename B, bool kTwoBuckets>
void update(const BucketUpdateArgs& a) {
  using acc = typename Num<T>::acc;
  const acc alpha = static_cast<acc>(a.alpha), beta = static_cast<acc>(a.beta), gamma = static_cast<acc>(a.gamma);
  cpu::for_each_chunk(a.segs, [&](const Segment& s, int64_t b, int64_t e) {
    T* __restrict x = static_cast<T*>(s.ptr);
    const B* __restrict y = static_cast<const B*>(a.y) + s.offset;
    const B* __restrict z = kTwoBuckets ? static_cast<const B*>(a.z) + s.offset : nullptr;
#pragma omp simd
    for (int64_t j = b; j < e; ++j) {
      acc t = beta * static_cast<acc>(Num<B>::load(y[j]));
      if (kTwoBuckets) t += gamma * static_cast<acc>(Num<B>::load(z[j]));
      x[j] = Num<T>::store(alpha * Num<T>::load(x[j]) + t);
    }
  });
}

}  // namespace

void bucket_update(const BucketUpdateArgs& a) {
  PYCOMM_DISPATCH_FLOAT(a.tensor_dtype, "bucket_update", [&] {
    using T = scalar_t;
    PYCOMM_DISPATCH_FLOAT(a.bucket_dtype, "bucket_update",
                          [&] { return a.z ? update<T, scalar_t, true>(a) : update<T, scalar_t, false>(a); });
  });
}

}  // namespace cpu::PYCOMM_ISA
}  // namespace pycomm
