// The bookkeeping around one op's run, shared by the progress thread (queue/op_queue) and the
// caller-thread path (queue/inline_run): submitted, prepared, started (in-flight record), completed
// (stats, Work), failed (the communicator breaks: its ranks no longer agree on what ran). Where the op
// is observed (QueuedOp::observed), each step also begins a phase in its trace and NVTX ranges.
#pragma once

#include <exception>

#include "diagnostics/health.h"
#include "queue/queued_op.h"

namespace pycomm {

// `phase` of an observed op begins at ts_ns: a trace event and the op's NVTX ranges.
void observe_phase(QueuedOp& op, TracePhase phase, int64_t ts_ns);
bool prepare_observed(QueuedOp& op);  // prepare_op's observed path

// At submission (OpQueue::admit): while something observes ops, marks the op observed and begins its
// queued phase.
inline void note_op_submitted(QueuedOp& op, const CommHealth& health) {
  if (!observing()) return;
  op.observed = true;
  op.trace_comm = health.trace_comm();
  observe_phase(op, TracePhase::kQueued, trace_now_ns());
}
// op.prepare(), for the queue and the caller-thread path. An observed op's first poll begins its op
// check and, when that poll does not finish it, the wait for its peers.
inline bool prepare_op(QueuedOp& op) {
  if (!op.observed) return op.prepare();
  return prepare_observed(op);
}
// Before op.start(): start time, in-flight record (observed: its wire phase begins).
void note_op_started(QueuedOp& op, CommHealth& health);
// After op.test() returned true: stats, Work completed, in-flight record dropped (observed: done).
void complete_op(QueuedOp& op, CommHealth& health);
// Fails the op's Work with `error` (the communicator's state untouched; observed: failed).
void fail_op(QueuedOp& op, std::exception_ptr error);
// The error of an op dropped because the communicator broke while it was pending or in flight.
std::exception_ptr abandoned_error(const CommHealth& health, const OpInfo& info);
// Inside a catch block: breaks the communicator with the exception as the cause and fails the op.
void fail_and_break(QueuedOp& op, CommHealth& health);

}  // namespace pycomm
