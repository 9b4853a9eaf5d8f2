// Running one op on the thread that submitted it, for callers that wait at once (async_op=False):
// no hand-off to the progress thread and back. OpQueue decides when this is allowed (nothing
// queued or in flight, so submission order holds); this file only runs the op, with the same
// PYCOMM_DEBUG check, stats, NVTX range and stall deadline as the progress thread.
#pragma once

#include <cstdint>
#include <functional>

#include "diagnostics/health.h"
#include "queue/queued_op.h"

namespace pycomm {

// PYCOMM_INLINE_BYTES (read once; default 0: off): the largest op, in OpInfo bytes, that may run on
// its caller's thread; larger ones keep the progress thread. Ops that never block (the MPI transport's
// host collectives on point-to-point messages, the local transport's host collectives) do not ask:
// they run there at any size (QueuedOp::can_run_inline). Off by default because the path needs
// nonblocking MPI collectives, and Open MPI's are slower than its blocking ones (measured 2 ranks, one
// node: 4 KiB all-reduce 25 us vs 12 us through the queue on an idle machine); it pays where ranks'
// threads outnumber the cores (same machine under load: 40-70 us vs 300-640 us). 0 keeps every op
// on the queue with blocking MPI calls. Malformed: std::invalid_argument.
int64_t inline_max_bytes();
// Whether an op of `bytes` (OpInfo bytes) is small enough for the caller's thread. The same on every
// rank for matching ops, so transports also key on it what must match across ranks (MPI: nonblocking
// collectives never match blocking ones, and one rank may run an op inline while another queues it).
bool fits_inline(int64_t bytes);

// Runs `op` to completion here: prepare, start (nonblocking calls only: on_caller_thread is set),
// `posted()` (the caller may then let later ops start alongside), then test, polled with backoff. Never throws; the
// outcome is in op.work: completed, the op's own error, StallError once timeout_s passes (<= 0: no limit), or
// PycommError when another thread broke the communicator meanwhile. The last three leave the communicator broken.
void run_inline(QueuedOp& op, CommHealth& health, double timeout_s, const std::function<void()>& posted);

}  // namespace pycomm
