#include "host/scale.h"

#include "kernels/cpu/parallel.h"

namespace pycomm {
namespace {

template <typename T>
void scale_typed(T* x, int64_t count, double factor) {
  using acc = typename Num<T>::acc;
  const acc f = static_cast<acc>(factor);
  cpu::for_each_range(count, 1, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t j = b; j < e; ++j) x[j] = Num<T>::store(Num<T>::load(x[j]) * f);
  });
}

}  // namespace

void scale_host(void* data, int64_t count, DType dtype, double factor) {
  if (count == 0) return;
  PYCOMM_DISPATCH_FLOAT(dtype, "AVG scaling", [&] { scale_typed(static_cast<scalar_t*>(data), count, factor); });
}

}  // namespace pycomm
