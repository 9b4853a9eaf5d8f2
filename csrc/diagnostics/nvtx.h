// NVTX3 ranges in the "pycomm" domain (roctx on ROCm, from the same calls). Compiled in with
// PYCOMM_WITH_NVTX (header-only, no link) or PYCOMM_WITH_ROCTX; otherwise these classes are empty.
// Ranges are made only while a tool attaches (NVTX_INJECTION64_PATH, see common/settings.h).
//
// Message formats (a GPU check's injection library reads them; keep the name and bytes first):
//   an op's range:    "allreduce #12 4096B count=1024 float32 op=SUM algo=ring comm=3 rank=0/2" [+ " bucket 2"]
//   a phase's range:  "<phase> allreduce #12 4096B", phase in queued, op_check, wait_peers, wire
//   a waiter's range: "wait allreduce #12 4096B"
// The payload of each is the op's bytes (int64); a phase's range has the phase's category
// (1 + TracePhase: 1 queued, 2 op_check, 3 wait_peers, 4 wire), named in the domain.
#pragma once

#include <cstdint>

#include "common/transport.h"
#include "diagnostics/trace.h"

namespace pycomm {

// The ranges of one op: its own range from submission to completion and one range per phase. Ops of
// one queue overlap (several in flight), so these are start/end ranges, not push/pop ones.
class NvtxOpRanges {
 public:
  NvtxOpRanges() = default;
  ~NvtxOpRanges() {
    if (op_open_ || phase_open_) end();
  }
  NvtxOpRanges(const NvtxOpRanges&) = delete;
  NvtxOpRanges& operator=(const NvtxOpRanges&) = delete;

  // `phase` begins: the previous phase's range ends and this one's starts (the first call also starts
  // the op's range); kDone / kFailed end both. No-op without a tool.
  void phase(const OpInfo& info, const TraceComm& comm, TracePhase phase);
  void end();

 private:
  uint64_t op_ = 0, phase_ = 0;
  bool op_open_ = false, phase_open_ = false;
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
  bool on_ = false;  // pushed: pops
};

}  // namespace pycomm
