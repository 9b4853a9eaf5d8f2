#include "kernels/cpu/parallel.h"

#include "kernels/cpu/isa.h"

#if PYCOMM_ISA_PRIMARY  // compiled once (see isa.h)

#include <cstdlib>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace pycomm::cpu {

int num_threads() {
  static const int n = [] {
    if (const char* env = std::getenv("PYCOMM_NUM_THREADS")) {
      int v = std::atoi(env);
      if (v > 0) return v;
    }
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
