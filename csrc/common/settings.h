// The PYCOMM_* runtime settings the compiled core uses. They are declared, read from the environment
// and validated in one place, pycomm/settings.py, which hands the parsed values over through
// _C.apply_settings (when the core loads and whenever a communicator is created): C++ never reads
// them itself, so Python and C++ cannot disagree on what a value means.
#pragma once

#include <cstdint>

namespace pycomm {

// PYCOMM_EAGER_BYTES's default, for the values the core holds before pycomm/settings.py applies its own
// (the same number there: pycomm._C.EAGER_BYTES_DEFAULT, which tests/comm/test_settings.py compares).
inline constexpr int64_t kEagerBytesDefault = 8192;

struct Settings {
  bool debug = false;                        // PYCOMM_DEBUG: the full op check
  double timeout_s = 0;                      // PYCOMM_TIMEOUT: stall timeout in seconds, 0: none
  int64_t inline_bytes = 0;                  // PYCOMM_INLINE_BYTES: largest op run on the caller's thread, 0: off
  int64_t spin_us = 0;                       // PYCOMM_SPIN_US: yield-spin before blocking
  int64_t eager_bytes = kEagerBytesDefault;  // PYCOMM_EAGER_BYTES: largest MPI op carried in op matching
  bool cpu_isa_generic = false;              // PYCOMM_CPU_ISA=generic: baseline x86-64 kernels
  int num_threads = 0;                       // PYCOMM_NUM_THREADS, 0: OpenMP's default
  bool nccl_split_init = false;              // PYCOMM_NCCL_SPLIT=init: split with a fresh unique id
  bool mpi_nonblocking = false;              // PYCOMM_MPI_NONBLOCKING: nonblocking MPI collectives
  int mpi_gpu_aware = -1;                    // PYCOMM_MPI_GPU_AWARE: -1 detect, 0 no, 1 yes
  int oversubscribed = -1;                   // PYCOMM_OVERSUBSCRIBED: -1 detect, 0 no, 1 yes
  bool nvtx_tool = false;                    // NVTX_INJECTION64_PATH is set: a profiler attaches to NVTX (not ours)
};

// The values last applied. Throws std::logic_error before the first apply_settings (the core was
// loaded other than through pycomm._build.core(), which applies them before returning it).
Settings settings();

void apply_settings(const Settings& values);

// Fields every op reads, without the lock and the copy (a locked copy per read cost 3% of a 1-rank
// 4-byte all-reduce, perf): settings().nvtx_tool, settings().timeout_s.
bool nvtx_tool_attached();
double timeout_setting_s();

}  // namespace pycomm
