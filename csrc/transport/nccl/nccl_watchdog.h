// The watchdog of one NCCL communicator: a thread that follows the ops in flight (in stream order),
// records their stats when they complete (GPU-timed), and enforces the stall deadline on ops nobody
// waits for on the host: Work::wait() only makes a stream wait, so without it a rank that skipped a
// collective would hang the others' GPUs forever. Past PYCOMM_TIMEOUT it aborts the communicator
// (the kernels exit), prints the stall error, and the next pycomm call on it raises StallError.
// An asynchronous NCCL error (a peer died, a network failure) aborts it the same way.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "transport/nccl/nccl_work.h"

namespace pycomm::nccl {

class NcclWatchdog {
 public:
  NcclWatchdog(std::shared_ptr<NcclComm> comm, int device);
  ~NcclWatchdog();  // stops the thread; ops still tracked are dropped
  NcclWatchdog(const NcclWatchdog&) = delete;
  NcclWatchdog& operator=(const NcclWatchdog&) = delete;

  // Follows `op` (submitted after every op tracked so far); timeout_s <= 0: no deadline.
  void track(std::shared_ptr<NcclOp> op, double timeout_s);

 private:
  using Clock = std::chrono::steady_clock;
  struct Entry {
    std::shared_ptr<NcclOp> op;
    double timeout_s;
    Clock::time_point submitted;
  };
  void loop();
  // One pass over the pending ops; false once the communicator is broken (nothing left to follow).
  bool poll();
  void finish(const Entry& e);

  std::shared_ptr<NcclComm> comm_;
  int device_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> pending_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace pycomm::nccl
