# Helpers for auto|on|off component options.
function(pycomm_check_option name)
  string(TOLOWER "${${name}}" v)
  if(NOT v MATCHES "^(auto|on|off)$")
    message(FATAL_ERROR "${name}=${${name}}: expected auto, on or off")
  endif()
  set(${name} "${v}" PARENT_SCOPE)
endfunction()

# A component that was asked for with `on` but cannot be built: stop and say how to provide it.
function(pycomm_requirement_failed name what how)
  message(FATAL_ERROR "${name}=on, but ${what} was not found. ${how}")
endfunction()

foreach(opt PYCOMM_CUDA PYCOMM_HIP PYCOMM_MPI PYCOMM_NCCL PYCOMM_NVTX)
  pycomm_check_option(${opt})
endforeach()
