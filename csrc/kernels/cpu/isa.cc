#include "kernels/cpu/isa.h"

#if PYCOMM_ISA_PRIMARY
#include "common/settings.h"

namespace pycomm::cpu {

bool use_avx2() {
  static const bool yes = [] {
#if defined(PYCOMM_HAVE_AVX2) && (defined(__x86_64__) || defined(__i386__))
    if (settings().cpu_isa_generic) return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") != 0;
#else
    return false;
#endif
  }();
  return yes;
}

const char* isa_name() { return use_avx2() ? "avx2" : "generic"; }

}  // namespace pycomm::cpu
#endif
