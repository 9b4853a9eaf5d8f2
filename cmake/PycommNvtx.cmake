# NVTX3 is header-only: compiled in when the headers are found, no cost and no link otherwise.
# Looked for in NVTX_HOME, the CUDA toolkit, then NVIDIA's pip wheels: nvidia-nvtx-cu12 installs
# nvidia/nvtx/include, nvidia-nvtx (CUDA 13) installs nvidia/cu13/include.
set(PYCOMM_NVTX_FOUND OFF)
if(NOT PYCOMM_NVTX STREQUAL "off")
  execute_process(COMMAND "${Python_EXECUTABLE}" -c
    "import os, importlib.util as u; s = u.find_spec('nvidia'); print(';'.join(os.path.join(r, d, 'include') for r in (s.submodule_search_locations if s else []) for d in ('nvtx', 'cu13', 'cu12')))"
    OUTPUT_VARIABLE nvtx_wheel_includes OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  find_path(PYCOMM_NVTX_INCLUDE nvtx3/nvToolsExt.h
    HINTS ENV NVTX_HOME ENV CUDA_HOME /usr/local/cuda ${nvtx_wheel_includes}
    PATH_SUFFIXES include)
  if(PYCOMM_NVTX_INCLUDE)
    set(PYCOMM_NVTX_FOUND ON)
    target_include_directories(_C PRIVATE "${PYCOMM_NVTX_INCLUDE}")
    target_compile_definitions(_C PRIVATE PYCOMM_WITH_NVTX)
  elseif(PYCOMM_NVTX STREQUAL "on")
    pycomm_requirement_failed(PYCOMM_NVTX "nvtx3/nvToolsExt.h" "Set NVTX_HOME, install the CUDA toolkit, or `pip install nvidia-nvtx`.")
  endif()
endif()

# roctx (ROCm): the same ranges from the same source (csrc/diagnostics/nvtx.cc) on a HIP build without
# NVTX headers; ROCm installs roctracer/roctx.h and libroctx64.
if(NOT PYCOMM_NVTX_FOUND AND PYCOMM_GPU_KIND STREQUAL "hip" AND NOT PYCOMM_NVTX STREQUAL "off")
  find_path(PYCOMM_ROCTX_INCLUDE roctx.h HINTS ENV ROCM_PATH ENV HIP_PATH /opt/rocm PATH_SUFFIXES include/roctracer)
  find_library(PYCOMM_ROCTX_LIBRARY roctx64 HINTS ENV ROCM_PATH ENV HIP_PATH /opt/rocm PATH_SUFFIXES lib lib64)
  if(PYCOMM_ROCTX_INCLUDE AND PYCOMM_ROCTX_LIBRARY)
    target_include_directories(_C PRIVATE "${PYCOMM_ROCTX_INCLUDE}")
    target_link_libraries(_C PRIVATE "${PYCOMM_ROCTX_LIBRARY}")
    target_compile_definitions(_C PRIVATE PYCOMM_WITH_ROCTX)
    message(STATUS "pycomm: roctx ranges (${PYCOMM_ROCTX_INCLUDE})")
  endif()
endif()
