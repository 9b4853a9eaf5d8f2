#include "queue/inline_run.h"

#include <chrono>
#include <optional>

#include "common/settings.h"
#include "diagnostics/stall.h"
#include "queue/op_lifecycle.h"
#include "queue/spin.h"

namespace pycomm {

int64_t inline_max_bytes() {
  static const int64_t limit = settings().inline_bytes;  // fixed at first use: it decides which MPI calls match
  return limit;
}

bool fits_inline(int64_t bytes) {
  const int64_t limit = inline_max_bytes();
  return limit > 0 && bytes <= limit;
}

void run_inline(QueuedOp& op, CommHealth& health, double timeout_s, const std::function<void()>& posted) {
  using Clock = std::chrono::steady_clock;
  const bool limited = timeout_s > 0;
  // The stall deadline counts from the first check (64 polls in, microseconds): most small ops are
  // done before it, and never read the clock for it.
  std::optional<Clock::time_point> deadline;
  auto past_deadline = [&] {
    if (!limited) return false;
    const Clock::time_point now = Clock::now();
    if (!deadline)
      deadline = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
    return now >= *deadline;
  };
  // Polls `step` until it returns true; false once the deadline passed or the communicator broke
  // (checked every few polls: both cost a clock read or a lock).
  auto poll = [&](auto step) {
    Backoff backoff;
    for (unsigned i = 1;; ++i) {
      if (step()) return true;
      if (i % 64 == 0 && (past_deadline() || health.broken())) return false;
      backoff.idle();
    }
  };
  op.on_caller_thread = true;
  bool started = false;
  try {
    if (poll([&] { return prepare_op(op); })) {
      note_op_started(op, health);
      started = true;
      op.start();
      posted();
      if (poll([&] { return op.test(); })) {
        complete_op(op, health);
        return;
      }
    }
  } catch (...) {
    if (started) health.note_finished(op.info.seq);
    fail_and_break(op, health);
    return;
  }
  health.note_abandoned();  // its requests may still be live: the communicator must not be freed
  if (health.broken()) {
    fail_op(op, abandoned_error(health, op.info));
    return;
  }
  try {
    raise_stall(op.info, timeout_s, health);  // names the op (still recorded in flight) and breaks
  } catch (...) {
    fail_op(op, std::current_exception());
  }
}

}  // namespace pycomm
