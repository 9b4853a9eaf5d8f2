// CPU kernels are compiled once per instruction set and picked at run time. x86-64's baseline
// (SSE2) has no cheap float -> int8/16-bit narrowing or per-lane shifts, so those loops run several
// times faster with AVX2; FMA stays off in every variant, so all variants give bit-identical results.
//
// Rule for csrc/kernels/cpu/*.cc (CMake compiles each file once per ISA): loops go in
// `namespace pycomm::cpu::PYCOMM_ISA`; everything else (checks, entry points that dispatch with
// PYCOMM_ISA_CALL) goes under `#if PYCOMM_ISA_PRIMARY`, so it is compiled once.
#pragma once

#if defined(PYCOMM_ISA_AVX2)
#define PYCOMM_ISA avx2
#define PYCOMM_ISA_PRIMARY 0
#else
#define PYCOMM_ISA generic
#define PYCOMM_ISA_PRIMARY 1
#endif

namespace pycomm::cpu {

// True when the AVX2 variants were built and this CPU runs them (PYCOMM_CPU_ISA=generic forces
// the baseline, e.g. to test it).
bool use_avx2();
const char* isa_name();  // "avx2" or "generic": what the kernels use in this process

}  // namespace pycomm::cpu

// Declares `void name(const Args&)` in every ISA namespace.
#define PYCOMM_ISA_DECLARE(name, Args) \
  namespace pycomm::cpu::generic {     \
  void name(const Args&);              \
  }                                    \
  namespace pycomm::cpu::avx2 {        \
  void name(const Args&);              \
  }

#if PYCOMM_ISA_PRIMARY && defined(PYCOMM_HAVE_AVX2)
#define PYCOMM_ISA_CALL(name, args) \
  (::pycomm::cpu::use_avx2() ? ::pycomm::cpu::avx2::name(args) : ::pycomm::cpu::generic::name(args))
#else
#define PYCOMM_ISA_CALL(name, args) ::pycomm::cpu::generic::name(args)
#endif
