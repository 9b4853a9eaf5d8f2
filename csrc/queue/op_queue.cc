#include "queue/op_queue.h"

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <list>
#include <mutex>

#include "common/errors.h"
#include "common/kernel_threads.h"
#include "diagnostics/stall.h"
#include "queue/inline_run.h"
#include "queue/op_lifecycle.h"
#include "queue/spin.h"

namespace pycomm {

struct OpQueue::State {
  std::shared_ptr<CommHealth> health;
  std::mutex mu;
  std::condition_variable cv;       // new op, or stop
  std::condition_variable exit_cv;  // the thread has ended
  std::deque<std::unique_ptr<QueuedOp>> pending;
  // Ops the thread took off `pending` and has not finished: raised under `mu` as an op is taken,
  // lowered once it finished, so a submitter holding `mu` that reads 0 knows nothing is in flight.
  std::atomic<size_t> busy{0};
  bool inline_running = false;  // an op is being posted on its caller's thread: nothing else may start
  // Ops posted on their callers' threads and not finished: later ops may start alongside them (a
  // blocking recv must not hold back the send its peer waits for), but the thread must not exit
  // under them, nor a submitter take the communicator for idle. Changed under `mu`.
  std::atomic<size_t> inline_in_flight{0};
  bool stopping = false;
  bool exited = false;
};

OpQueue::OpQueue(std::shared_ptr<CommHealth> health) : health_(health), state_(std::make_shared<State>()) {
  state_->health = std::move(health);
  thread_ = std::thread(&OpQueue::loop, state_);
}

OpQueue::~OpQueue() {
  double t = 0;
  try {
    t = stall_timeout_s();
  } catch (...) {
    t = 300;  // settings never applied (cannot happen once a queue exists); a destructor must not throw
  }
  stop(t);
}

void OpQueue::admit(QueuedOp& op) {
  if (state_->stopping)
    throw PycommError(op.info.name + ": the " + health_->label() + " was shut down (pycomm.finalize())");
  health_->check_usable(op.info.name.c_str());
  op.info.seq = next_seq_++;
  if (op.info.collective) op.info.collective_index = next_collective_++;
  health_->note_submitted(op.info);  // this rank has reached the op: other ranks' stall errors read it
  op.work = std::make_shared<HostWork>(op.info, health_);
  note_op_submitted(op, *health_);
}

std::shared_ptr<HostWork> OpQueue::enqueue(std::unique_ptr<QueuedOp> op) {
  admit(*op);
  auto work = op->work;
  state_->pending.push_back(std::move(op));
  state_->cv.notify_one();
  return work;
}

std::shared_ptr<HostWork> OpQueue::submit(std::unique_ptr<QueuedOp> op, bool caller_waits) {
  if (!caller_waits || !op->can_run_inline()) {
    std::lock_guard<std::mutex> lk(state_->mu);
    return enqueue(std::move(op));
  }
  const double timeout_s = stall_timeout_s();
  {
    std::lock_guard<std::mutex> lk(state_->mu);
    // Idle: every earlier op of this communicator has completed, so running this one now keeps the
    // submission order; `inline_running` (while posting) and `inline_in_flight` keep other threads queued.
    if (!state_->pending.empty() || state_->busy.load() != 0 || state_->inline_running ||
        state_->inline_in_flight.load() != 0)
      return enqueue(std::move(op));
    admit(*op);
    state_->inline_running = true;
  }
  // Exclusive while the op is posted (posting order is what ranks match on); once posted, later ops
  // may start while this thread waits. Released on every exit, exceptions included.
  struct InlineSlot {
    State& st;
    bool posted = false;
    // The thread is woken only when it has something to do: a futex wake-up per op (and the thread
    // then taking a core) cost more than a small all-reduce itself.
    void post() {
      bool wake = false;
      {
        std::lock_guard<std::mutex> lk(st.mu);
        st.inline_running = false;
        ++st.inline_in_flight;
        posted = true;
        wake = !st.pending.empty();
      }
      if (wake) st.cv.notify_all();  // ops submitted while it was being posted
    }
    ~InlineSlot() {
      bool wake = false;
      {
        std::lock_guard<std::mutex> lk(st.mu);
        if (posted)
          --st.inline_in_flight;
        else
          st.inline_running = false;
        wake = !st.pending.empty() || st.stopping;
      }
      if (wake) st.cv.notify_all();  // ops waiting for it, or a stopping thread waiting to exit
    }
  } slot{*state_};
  run_inline(*op, *health_, timeout_s, [&slot] { slot.post(); });
  return op->work;
}

void OpQueue::run_and_wait(std::unique_ptr<QueuedOp> op) {
  auto work = submit(std::move(op), false);
  work->wait(0, stall_timeout_s());
}

bool OpQueue::stop(double timeout_s) {
  if (stopped_) return clean_;
  stopped_ = true;
  std::unique_lock<std::mutex> lk(state_->mu);
  state_->stopping = true;
  state_->cv.notify_all();
  auto ended = [&] { return state_->exited; };
  if (health_->broken()) timeout_s = 2;  // nothing in flight will complete any more
  bool done = timeout_s > 0 ? state_->exit_cv.wait_for(lk, std::chrono::duration<double>(timeout_s), ended)
                            : (state_->exit_cv.wait(lk, ended), true);
  if (!done) {
    health_->mark_broken("shut down with ops still in flight after PYCOMM_TIMEOUT; " + health_->in_flight_summary());
    state_->cv.notify_all();
    done = state_->exit_cv.wait_for(lk, std::chrono::seconds(2), ended);
  }
  lk.unlock();
  if (done) {
    thread_.join();
  } else {
    thread_.detach();  // stuck inside a blocking transport call; it owns only shared state
    clean_ = false;
  }
  return clean_;
}

namespace {

// "pycomm-progress" in /proc/<pid>/task/*/comm, top -H, perf and gdb (15 characters: the kernel's limit).
void name_this_thread() { pthread_setname_np(pthread_self(), "pycomm-progress"); }

// A collective over 32 KiB that moves data does not start while another such collective is in flight
// on this queue (ops run on their callers' threads are not counted). Concurrent large host collectives
// fight over the cores and the last-level cache instead of overlapping: ResNet-50's gradients as async
// all-reduces on 2 ranks of the 2-core machine took 1.19x the blocking calls' time with every op in
// flight at once, 1.06x one at a time, 1.15-1.21x with two (allreduce_coalesced: 0.63-0.66x -> 0.54-0.55x
// flat mpi4py). Collectives never wait for a later op, so the earliest one in flight always completes
// and the rule cannot deadlock; sends, receives and smaller collectives are never held back themselves.
// Op matching alone (allreduce_quantized's, bus_factor 0) moves no data and is not held back either.
constexpr int64_t kRunsAloneBytes = 32 << 10;

bool runs_alone(const QueuedOp& op) {
  return op.info.collective && op.info.bytes > kRunsAloneBytes && op.info.bus_factor != 0.0;
}

bool held_back(const QueuedOp& next, const std::list<std::unique_ptr<QueuedOp>>& in_flight) {
  if (!runs_alone(next)) return false;
  for (const auto& op : in_flight)
    if (runs_alone(*op)) return true;
  return false;
}

}  // namespace

void OpQueue::loop(std::shared_ptr<State> st) {
  CommHealth& health = *st->health;
  std::list<std::unique_ptr<QueuedOp>> in_flight;
  name_this_thread();
  kernels_on_this_thread_only = true;  // the rank's own thread computes beside this one
  Backoff backoff(/*background=*/true);
  while (true) {
    QueuedOp* next = nullptr;
    {
      std::unique_lock<std::mutex> lk(st->mu);
      if (health.broken()) {
        if (!in_flight.empty() || !st->pending.empty())
          health.note_abandoned();  // conservative: a pending op may be mid-check
        for (auto& op : in_flight) fail_op(*op, abandoned_error(health, op->info));
        for (auto& op : st->pending) fail_op(*op, abandoned_error(health, op->info));
        in_flight.clear();
        st->busy = 0;
        st->pending.clear();
        auto may_exit = [&] { return st->stopping && !st->inline_running && st->inline_in_flight.load() == 0; };
        if (may_exit()) break;
        st->cv.wait(lk, [&] { return !st->pending.empty() || may_exit(); });
        continue;
      }
      if (st->inline_running && in_flight.empty()) {
        // An op runs on its caller's thread: ops submitted meanwhile start after it; the
        // communicator stays alive (no exit on stop) until it returned.
        st->cv.wait(lk, [&] { return !st->inline_running; });
        continue;
      }
      if (st->pending.empty() && in_flight.empty()) {
        auto may_exit = [&] { return st->stopping && st->inline_in_flight.load() == 0; };
        if (may_exit()) break;
        // Sleep, no spinning: blocking host all-reduces run on their callers' threads, and a spinning
        // progress thread took the cores that ranks on a full node need.
        st->cv.wait(lk, [&] { return !st->pending.empty() || may_exit(); });
        continue;
      }
      if (!st->pending.empty()) next = st->pending.front().get();
    }
    bool progressed = false;
    if (next && !(next->needs_drain() && (!in_flight.empty() || st->inline_in_flight.load() != 0)) &&
        !held_back(*next, in_flight)) {
      std::unique_ptr<QueuedOp> op;
      try {
        if (prepare_op(*next)) {
          {
            std::lock_guard<std::mutex> lk(st->mu);
            op = std::move(st->pending.front());
            st->pending.pop_front();
            ++st->busy;
          }
          note_op_started(*op, health);
          op->start();
          in_flight.push_back(std::move(op));
          progressed = true;
        }
      } catch (...) {
        if (!op) {
          std::lock_guard<std::mutex> lk(st->mu);
          op = std::move(st->pending.front());
          st->pending.pop_front();
        }
        health.note_finished(op->info.seq);
        fail_and_break(*op, health);
        progressed = true;
      }
    }
    for (auto it = in_flight.begin(); it != in_flight.end();) {
      QueuedOp& op = **it;
      bool finished = false;
      try {
        if (op.test()) {
          --st->busy;  // before its waiter wakes: the waiter's next op may then run on its own thread
          finished = true;
          complete_op(op, health);
        }
      } catch (...) {
        if (!finished) --st->busy;
        finished = true;
        fail_and_break(op, health);
        health.note_finished(op.info.seq);
      }
      if (finished) {
        it = in_flight.erase(it);
        progressed = true;
      } else {
        ++it;
      }
    }
    if (progressed)
      backoff.progressed();
    else
      backoff.idle();
  }
  std::lock_guard<std::mutex> lk(st->mu);
  st->exited = true;
  st->exit_cv.notify_all();
}

}  // namespace pycomm
