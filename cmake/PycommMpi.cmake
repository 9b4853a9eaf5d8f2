# MPI transport, linked against the MPI that mpi4py was built with (so pycomm.from_mpi4py works).
set(PYCOMM_MPI_FOUND OFF)
if(NOT PYCOMM_MPI STREQUAL "off")
  if(NOT MPI_C_COMPILER)
    execute_process(COMMAND "${Python_EXECUTABLE}" -c "import mpi4py; print(mpi4py.get_config().get('mpicc', ''))"
                    OUTPUT_VARIABLE mpi4py_mpicc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(mpi4py_mpicc AND EXISTS "${mpi4py_mpicc}")
      set(MPI_C_COMPILER "${mpi4py_mpicc}")
    endif()
  endif()
  find_package(MPI COMPONENTS C)
  file(GLOB PYCOMM_MPI_SOURCES CONFIGURE_DEPENDS csrc/transport/mpi/*.cc)
  if(MPI_C_FOUND)
    set(PYCOMM_MPI_FOUND ON)
    target_sources(_C PRIVATE ${PYCOMM_MPI_SOURCES})
    target_link_libraries(_C PRIVATE MPI::MPI_C)
    # The C API only: mpi.h would otherwise pull in Open MPI's / MPICH's C++ bindings, whose inline
    # classes reference libmpi_cxx symbols that only the Release build's LTO drops (a Debug or
    # RelWithDebInfo core failed to load: undefined symbol MPI::Datatype::Free).
    target_compile_definitions(_C PRIVATE PYCOMM_WITH_MPI OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
  elseif(PYCOMM_MPI STREQUAL "on")
    pycomm_requirement_failed(PYCOMM_MPI "an MPI library" "Install one (apt-get install openmpi-bin libopenmpi-dev) or set MPI_C_COMPILER to its mpicc.")
  endif()
endif()
