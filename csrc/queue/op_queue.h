// The progress thread of one communicator: starts ops strictly in submission order (so ranks that
// submit the same sequence never deadlock), a collective over 32 KiB only while no other one is in
// flight on the queue, polls the ones in flight, completes or fails their Work, and records stats and
// NVTX ranges. Any failure inside the queue breaks the communicator.
// An op whose caller waits for it at once may instead run on that thread while the queue is idle.
#pragma once

#include <cstdint>
#include <memory>
#include <thread>

#include "diagnostics/health.h"
#include "queue/queued_op.h"

namespace pycomm {

class OpQueue {
 public:
  explicit OpQueue(std::shared_ptr<CommHealth> health);
  ~OpQueue();  // stop(stall timeout)
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  // Assigns the op its sequence number and queues it. Throws PycommError when the communicator is
  // broken or stopped. `caller_waits` (async_op=False: the caller waits for the op at once): when the
  // queue is idle (nothing pending or in flight) and the op allows it (QueuedOp::can_run_inline, at
  // runs it here on the calling thread and returns its finished Work.
  std::shared_ptr<HostWork> submit(std::unique_ptr<QueuedOp> op, bool caller_waits);
  // Runs a blocking op (split, ...) on the queue and waits for it with the stall deadline.
  void run_and_wait(std::unique_ptr<QueuedOp> op);

  // Lets submitted ops finish (for up to timeout_s; past it the communicator is marked broken) and
  // ends the thread. True when the thread ended cleanly; false when it was abandoned inside a
  // blocking call (the caller must then leak what that call uses). Idempotent.
  bool stop(double timeout_s);

  const std::shared_ptr<CommHealth>& health() const { return health_; }

 private:
  struct State;
  static void loop(std::shared_ptr<State> st);
  // Under the lock: refuses ops of a stopped or broken communicator, numbers the op, makes its Work.
  void admit(QueuedOp& op);
  // Under the lock: admit(), then hands the op to the thread.
  std::shared_ptr<HostWork> enqueue(std::unique_ptr<QueuedOp> op);

  std::shared_ptr<CommHealth> health_;
  std::shared_ptr<State> state_;
  std::thread thread_;
  uint64_t next_seq_ = 0;
  int64_t next_collective_ = 0;  // OpInfo::collective_index
  bool stopped_ = false;
  bool clean_ = true;
};

}  // namespace pycomm
