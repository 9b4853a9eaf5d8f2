#include <pybind11/stl.h>

#include <map>
#include <string>

#include "bindings/bindings.h"
#include "kernels/cpu/isa.h"

namespace pycomm::bind {

void register_build_info(pybind11::module_& m) {
  m.def(
      "build_info",
      [] {
        pybind11::dict d;
        d["cpu"] = true;
        d["cpu_isa"] = std::string(pycomm::cpu::isa_name());  // the CPU kernel variant this machine runs
#ifdef _OPENMP
        d["openmp"] = true;
#else
        d["openmp"] = false;
#endif
#ifdef PYCOMM_WITH_CUDA
        d["cuda"] = true;
#else
        d["cuda"] = false;
#endif
#ifdef PYCOMM_WITH_HIP
        d["hip"] = true;
#else
        d["hip"] = false;
#endif
#ifdef PYCOMM_WITH_MPI
        d["mpi"] = true;
#else
        d["mpi"] = false;
#endif
#ifdef PYCOMM_WITH_NCCL
        d["nccl"] = true;
#else
        d["nccl"] = false;
#endif
#ifdef PYCOMM_WITH_NVTX
        d["nvtx"] = true;
#else
        d["nvtx"] = false;
#endif
#ifdef PYCOMM_GPU_ARCHS
        d["gpu_archs"] = std::string(PYCOMM_GPU_ARCHS);
#else
        d["gpu_archs"] = std::string();
#endif
        return d;
      },
      "What this build of pycomm._C was compiled with.");
}

}  // namespace pycomm::bind
