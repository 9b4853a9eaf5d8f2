#include "queue/op_lifecycle.h"

#include <chrono>
#include <stdexcept>

#include "common/errors.h"
#include "diagnostics/stats.h"

namespace pycomm {

void note_op_started(QueuedOp& op, CommHealth& health) {
  op.started = std::chrono::steady_clock::now();
  op.range = std::make_unique<NvtxOpRange>(op.info);
  health.note_started(op.info, op.started);
}

void complete_op(QueuedOp& op, CommHealth& health) {
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - op.started).count();
  stats_record(op.info.name, op.info.bytes, op.info.bytes * op.info.bus_factor, secs, op.on_caller_thread);
  op.range.reset();
  op.work->complete();
  health.note_finished(op.info.seq);
}

void fail_op(QueuedOp& op, std::exception_ptr error) {
  op.range.reset();
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
