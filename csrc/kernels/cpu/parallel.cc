#include "kernels/cpu/parallel.h"

#include "kernels/cpu/isa.h"

#if PYCOMM_ISA_PRIMARY  // compiled once (see isa.h)

#include "common/settings.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace pycomm::cpu {

int num_threads() {
  static const int n = [] {
    if (int v = settings().num_threads; v > 0) return v;
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
  }();
  return n;
}

}  // namespace pycomm::cpu
#endif
