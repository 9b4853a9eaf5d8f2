// One ncclComm_t and its fate, shared by the transport, its Work objects and its watchdog: NCCL
// calls are serialised here, failures break the communicator (CommHealth), and abort() may come
// from any thread (the watchdog, a waiter past the stall deadline) to unblock hung kernels.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "diagnostics/health.h"
#include "transport/nccl/nccl_compat.h"

namespace pycomm::nccl {

class NcclComm {
 public:
  NcclComm(ncclComm_t comm, std::shared_ptr<CommHealth> health);
  ~NcclComm();  // aborts a communicator nobody released (destroy could block on hung work)
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // Runs `f(comm)` (returning ncclResult_t) under the call lock; a failure marks the communicator
  // broken and throws PycommError naming `what` and NCCL's explanation.
  template <typename F>
  void call(const char* what, F&& f) {
    std::lock_guard<std::mutex> lk(call_mu_);
    ncclComm_t c = usable(what);
    check(f(c), what);
  }

  // Throws StallError (after a stall) or PycommError (other failures, shut down) when broken.
  void throw_if_broken(const char* what) const;
  // Marks the communicator broken with `reason` (kept if one is there) and aborts it, once: its
  // kernels exit and later calls fail. Safe from any thread, also while a call is hung in NCCL.
  void abort(const std::string& reason);
  // An abort ended it (stall, NCCL error, mismatch, shutdown with ops running): results of ops
  // that had not completed before are invalid. A clean shutdown (destroy) is not an abort.
  bool aborted() const;
  // After a stall of `op` past timeout_s: aborts and returns the StallError message.
  std::string abort_for_stall(const OpInfo& op, double timeout_s);
  // Clean release once all work has completed (ncclCommDestroy); later calls fail.
  void destroy();
  // NCCL's asynchronous error state (ncclSuccess while healthy).
  ncclResult_t async_error();

  CommHealth& health() const { return *health_; }

 private:
  ncclComm_t usable(const char* what);
  void check(ncclResult_t r, const char* what);
  void abort_now();  // under state_mu_

  std::shared_ptr<CommHealth> health_;
  std::mutex call_mu_;           // one NCCL call at a time on comm_
  mutable std::mutex state_mu_;  // guards comm_ / released_ against abort from another thread
  ncclComm_t comm_;
  bool released_ = false;
  bool aborted_ = false;
};

}  // namespace pycomm::nccl
