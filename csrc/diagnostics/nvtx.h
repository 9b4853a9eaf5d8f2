// NVTX3 ranges in the "pycomm" domain. Compiled in with PYCOMM_WITH_NVTX (header-only, no link);
// otherwise these classes are empty and cost nothing.
#pragma once

#include <cstdint>

#include "common/transport.h"

#ifdef PYCOMM_WITH_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace pycomm {

// A range covering one op from its start on the queue to its completion. Ops of one queue overlap
// (several in flight), so this is a start/end range, not a push/pop one. Message: name, seq,
// bucket; payload: bytes.
class NvtxOpRange {
 public:
  explicit NvtxOpRange(const OpInfo& info);
  ~NvtxOpRange();
  NvtxOpRange(const NvtxOpRange&) = delete;
  NvtxOpRange& operator=(const NvtxOpRange&) = delete;

 private:
#ifdef PYCOMM_WITH_NVTX
  nvtxRangeId_t id_ = 0;
  bool on_ = false;  // a profiler was attached when it started: it ends it
#endif
};

// A push/pop range on the calling thread, e.g. a Python thread waiting on an op; or around one kernel
// call (for a GPU kernel: its launch), message "<kernel> <bytes>B cpu|gpu<N>", payload: bytes (the
// kernel's input data).
class NvtxScope {
 public:
  NvtxScope(const char* what, const OpInfo& info);
  NvtxScope(const char* kernel, int64_t bytes, int device);
  ~NvtxScope();
  NvtxScope(const NvtxScope&) = delete;
  NvtxScope& operator=(const NvtxScope&) = delete;

 private:
#ifdef PYCOMM_WITH_NVTX
  bool on_ = false;  // pushed: pops
#endif
};

}  // namespace pycomm
