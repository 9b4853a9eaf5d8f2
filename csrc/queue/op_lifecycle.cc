#include "queue/op_lifecycle.h"

#include <chrono>
#include <stdexcept>

#include "common/errors.h"
#include "diagnostics/stats.h"

namespace pycomm {
namespace {

int64_t ns_of(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

void observe_phase(QueuedOp& op, TracePhase phase, int64_t ts_ns) {
  const uint8_t flags = op.on_caller_thread ? kTraceOnCaller : 0;
  if (phase == TracePhase::kDone && op.received && op.info.peer < 0) {
    OpInfo got = op.info;  // a receive from any source: name the rank it came from
    got.peer = op.received->source;
    trace_op(got, op.trace_comm, phase, ts_ns, flags);
  } else {
    trace_op(op.info, op.trace_comm, phase, ts_ns, flags);
  }
  op.nvtx.phase(op.info, op.trace_comm, phase);
}

bool prepare_observed(QueuedOp& op) {
  if (op.check_posted) return op.prepare();
  observe_phase(op, TracePhase::kOpCheck, trace_now_ns());
  const bool ready = op.prepare();
  op.check_posted = true;
  if (!ready) observe_phase(op, TracePhase::kWaitPeers, trace_now_ns());
  return ready;
}

void note_op_started(QueuedOp& op, CommHealth& health) {
  op.started = std::chrono::steady_clock::now();
  if (op.observed) observe_phase(op, TracePhase::kWire, ns_of(op.started));
  health.note_started(op.info, op.started);
}

void complete_op(QueuedOp& op, CommHealth& health) {
  const auto now = std::chrono::steady_clock::now();
  double secs = std::chrono::duration<double>(now - op.started).count();
  stats_record(op.info.name, op.info.bytes, op.info.bytes * op.info.bus_factor, secs, op.on_caller_thread);
  if (op.observed) observe_phase(op, TracePhase::kDone, ns_of(now));
  op.work->complete();
  health.note_finished(op.info.seq);
}

void fail_op(QueuedOp& op, std::exception_ptr error) {
  if (op.observed) observe_phase(op, TracePhase::kFailed, trace_now_ns());
  op.work->fail(std::move(error));
}

std::exception_ptr abandoned_error(const CommHealth& health, const OpInfo& info) {
  return std::make_exception_ptr(PycommError(info.describe() + " was abandoned: the " + health.label() +
                                             " is broken. Cause: " + health.broken_reason()));
}

void fail_and_break(QueuedOp& op, CommHealth& health) {
  std::exception_ptr e = std::current_exception();
  try {
    throw;
  } catch (const std::exception& ex) {
    health.mark_broken(op.info.describe() + " failed: " + ex.what());
  } catch (...) {
    health.mark_broken(op.info.describe() + " failed with an unknown exception");
  }
  fail_op(op, e);
}

}  // namespace pycomm
