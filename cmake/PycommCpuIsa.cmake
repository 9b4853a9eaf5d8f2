# CPU kernels compiled a second time with AVX2 and picked at run time (csrc/kernels/cpu/isa.h):
# SSE2-only x86-64 code narrows floats to int8/bf16 several times slower. -ffp-contract=off and no
# -mfma keep every variant bit-identical to the baseline.
include(CheckCXXCompilerFlag)
set(PYCOMM_CPU_ISAS "generic")
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  check_cxx_compiler_flag(-mavx2 PYCOMM_CXX_HAS_MAVX2)
  if(PYCOMM_CXX_HAS_MAVX2)
    file(GLOB PYCOMM_KERNEL_SOURCES CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/csrc/kernels/cpu/*.cc")
    add_library(pycomm_cpu_avx2 OBJECT ${PYCOMM_KERNEL_SOURCES})
    target_include_directories(pycomm_cpu_avx2 PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}/csrc")
    target_compile_definitions(pycomm_cpu_avx2 PRIVATE PYCOMM_ISA_AVX2)
    target_compile_options(pycomm_cpu_avx2 PRIVATE -O3 -mavx2 -ffp-contract=off -fno-trapping-math
                           -fvisibility=hidden -Wall -Wextra -Wno-unused-parameter)
    if(OpenMP_CXX_FOUND)
      target_link_libraries(pycomm_cpu_avx2 PRIVATE OpenMP::OpenMP_CXX)
    endif()
    target_sources(_C PRIVATE $<TARGET_OBJECTS:pycomm_cpu_avx2>)
    target_compile_definitions(_C PRIVATE PYCOMM_HAVE_AVX2)
    list(APPEND PYCOMM_CPU_ISAS "avx2")
  endif()
endif()
