// The bookkeeping around one op's run, shared by the progress thread (queue/op_queue) and the
// caller-thread path (queue/inline_run): started (NVTX range, in-flight record), completed
// (stats, Work), failed (the communicator breaks: its ranks no longer agree on what ran).
#pragma once

#include <exception>

#include "diagnostics/health.h"
#include "queue/queued_op.h"

namespace pycomm {

// Before op.start(): start time, NVTX range, in-flight record.
void note_op_started(QueuedOp& op, CommHealth& health);
// After op.test() returned true: stats, NVTX range closed, Work completed, in-flight record dropped.
void complete_op(QueuedOp& op, CommHealth& health);
// Closes the NVTX range and fails the op's Work with `error` (the communicator's state untouched).
void fail_op(QueuedOp& op, std::exception_ptr error);
// The error of an op dropped because the communicator broke while it was pending or in flight.
std::exception_ptr abandoned_error(const CommHealth& health, const OpInfo& info);
// Inside a catch block: breaks the communicator with the exception as the cause and fails the op.
void fail_and_break(QueuedOp& op, CommHealth& health);

}  // namespace pycomm
