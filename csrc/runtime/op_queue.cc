#include "runtime/op_queue.h"

#include <sched.h>

#include <condition_variable>
#include <deque>
#include <list>
#include <mutex>

#include "runtime/errors.h"
#include "runtime/stall.h"
#include "runtime/stats.h"

namespace pycomm {

struct OpQueue::State {
  std::shared_ptr<CommHealth> health;
  std::mutex mu;
  std::condition_variable cv;       // new op, or stop
  std::condition_variable exit_cv;  // the thread has ended
  std::deque<std::unique_ptr<QueuedOp>> pending;
  bool stopping = false;
  bool exited = false;
};

namespace {

using Clock = std::chrono::steady_clock;

void fail_op(QueuedOp& op, std::exception_ptr e) {
  op.range.reset();
  op.work->fail(std::move(e));
}

std::exception_ptr broken_error(const CommHealth& h, const OpInfo& info) {
  return std::make_exception_ptr(PycommError(info.describe() + " was abandoned: the " + h.label() +
                                             " is broken. Cause: " + h.broken_reason()));
}

// Any exception escaping an op breaks the communicator: its ranks no longer agree on what ran.
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

// Spin while progress is likely, then yield the core, then sleep: an irecv that waits minutes for
// its sender must not burn a core that ranks on an oversubscribed node share.
class Backoff {
 public:
  void progressed() { idle_since_ = Clock::now(); spins_ = 0; }
  void idle() {
    if (++spins_ < 256) return;
    if (Clock::now() - idle_since_ < std::chrono::seconds(1)) { sched_yield(); return; }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }

 private:
  Clock::time_point idle_since_ = Clock::now();
  int spins_ = 0;
};

}  // namespace

OpQueue::OpQueue(std::shared_ptr<CommHealth> health) : health_(health), state_(std::make_shared<State>()) {
  state_->health = std::move(health);
  thread_ = std::thread(&OpQueue::loop, state_);
}

OpQueue::~OpQueue() {
  double t = 0;
  try {
    t = stall_timeout_s();
  } catch (...) {
    t = kDefaultStallTimeoutS;
  }
  stop(t);
}

std::shared_ptr<HostWork> OpQueue::submit(std::unique_ptr<QueuedOp> op) {
  std::lock_guard<std::mutex> lk(state_->mu);
  if (state_->stopping)
    throw PycommError(op->info.name + ": the " + health_->label() + " was shut down (pycomm.finalize())");
  health_->check_usable(op->info.name.c_str());
  op->info.seq = next_seq_++;
  op->work = std::make_shared<HostWork>(op->info, health_);
  auto work = op->work;
  state_->pending.push_back(std::move(op));
  state_->cv.notify_one();
  return work;
}

void OpQueue::run_and_wait(std::unique_ptr<QueuedOp> op) {
  auto work = submit(std::move(op));
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
    health_->mark_broken("shut down with ops still in flight after PYCOMM_TIMEOUT; " +
                         health_->in_flight_summary());
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

void OpQueue::loop(std::shared_ptr<State> st) {
  CommHealth& health = *st->health;
  std::list<std::unique_ptr<QueuedOp>> in_flight;
  Backoff backoff;
  while (true) {
    QueuedOp* next = nullptr;
    {
      std::unique_lock<std::mutex> lk(st->mu);
      if (health.broken()) {
        if (!in_flight.empty() || !st->pending.empty()) health.note_abandoned();  // conservative: a pending op may be mid-check
        for (auto& op : in_flight) fail_op(*op, broken_error(health, op->info));
        for (auto& op : st->pending) fail_op(*op, broken_error(health, op->info));
        in_flight.clear();
        st->pending.clear();
        if (st->stopping) break;
        st->cv.wait(lk, [&] { return !st->pending.empty() || st->stopping; });
        continue;
      }
      if (st->pending.empty() && in_flight.empty()) {
        if (st->stopping) break;
        st->cv.wait(lk, [&] { return !st->pending.empty() || st->stopping; });
        continue;
      }
      if (!st->pending.empty()) next = st->pending.front().get();
    }
    bool progressed = false;
    if (next && !(next->needs_drain() && !in_flight.empty())) {
      std::unique_ptr<QueuedOp> op;
      try {
        if (next->prepare()) {
          {
            std::lock_guard<std::mutex> lk(st->mu);
            op = std::move(st->pending.front());
            st->pending.pop_front();
          }
          op->started = Clock::now();
          op->range = std::make_unique<NvtxOpRange>(op->info);
          health.note_started(op->info);
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
          double secs = std::chrono::duration<double>(Clock::now() - op.started).count();
          stats_record(op.info.name, op.info.bytes, op.info.bytes * op.info.bus_factor, secs);
          op.range.reset();
          op.work->complete();
          finished = true;
        }
      } catch (...) {
        fail_and_break(op, health);
        finished = true;
      }
      if (finished) {
        health.note_finished(op.info.seq);
        it = in_flight.erase(it);
        progressed = true;
      } else {
        ++it;
      }
    }
    if (progressed) backoff.progressed();
    else backoff.idle();
  }
  std::lock_guard<std::mutex> lk(st->mu);
  st->exited = true;
  st->exit_cv.notify_all();
}

}  // namespace pycomm
