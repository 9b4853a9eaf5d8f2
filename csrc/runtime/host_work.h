// Work of an op executed by a host queue (MPI, the local transport): completion flag + condition
// variable, the op's exception handed to the waiter, and the stall deadline enforced on the waiter
// (the queue thread never has to notice a stall for the waiter to get its error).
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>

#include "runtime/health.h"
#include "transport/transport.h"

namespace pycomm {

class HostWork : public Work {
 public:
  HostWork(OpInfo info, std::shared_ptr<CommHealth> health) : info_(std::move(info)), health_(std::move(health)) {}

  bool is_completed() override;  // true after success or failure (wait() then raises)
  // Host ops complete on the host, so `stream` needs nothing: results are in place on return.
  void wait(uintptr_t stream, double timeout_s) override;
  void synchronize(double timeout_s) override { wait(0, timeout_s); }
  const OpInfo& info() const override { return info_; }
  std::shared_ptr<const P2pMessage> received() override;  // after a successful completion only
  void set_received(std::shared_ptr<P2pMessage> r) { received_ = std::move(r); }

  // Called by the queue thread, exactly once.
  void complete();
  void fail(std::exception_ptr error);

 private:
  OpInfo info_;
  std::shared_ptr<CommHealth> health_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::atomic<bool> done_flag_{false};  // done_, readable without the lock (spinning waiters)
  std::exception_ptr error_;
  std::shared_ptr<P2pMessage> received_;
};

}  // namespace pycomm
