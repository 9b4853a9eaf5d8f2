# NVTX3 is header-only: compiled in when the headers are found, no cost and no link otherwise.
set(PYCOMM_NVTX_FOUND OFF)
if(NOT PYCOMM_NVTX STREQUAL "off")
  execute_process(COMMAND "${Python_EXECUTABLE}" -c
    "import os, importlib.util as u; s = u.find_spec('nvidia.nvtx') or u.find_spec('nvidia'); print(os.path.join(list(s.submodule_search_locations)[0], 'include') if s else '')"
    OUTPUT_VARIABLE nvtx_wheel_include OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  find_path(PYCOMM_NVTX_INCLUDE nvtx3/nvToolsExt.h
    HINTS ENV NVTX_HOME ENV CUDA_HOME /usr/local/cuda "${nvtx_wheel_include}" "${nvtx_wheel_include}/../nvtx/include"
    PATH_SUFFIXES include)
  if(PYCOMM_NVTX_INCLUDE)
    set(PYCOMM_NVTX_FOUND ON)
    target_include_directories(_C PRIVATE "${PYCOMM_NVTX_INCLUDE}")
    target_compile_definitions(_C PRIVATE PYCOMM_WITH_NVTX)
  elseif(PYCOMM_NVTX STREQUAL "on")
    pycomm_requirement_failed(PYCOMM_NVTX "nvtx3/nvToolsExt.h" "Set NVTX_HOME, install the CUDA toolkit, or `pip install nvidia-nvtx`.")
  endif()
endif()
