// One NCCL op in flight and its Work. The op runs on the communicator's stream between two timing
// events; wait() makes the caller's stream wait on the completion event (no host sync),
// synchronize() polls it on the host with the stall deadline (then aborts the communicator and
// raises StallError naming the op).
#pragma once

#include <memory>

#include "common/transport.h"
#include "transport/nccl/nccl_comm.h"

namespace pycomm::nccl {

struct NcclOp {
  // Creates the events on the current device.
  NcclOp(OpInfo info, bool host_blocking);
  ~NcclOp();
  NcclOp(const NcclOp&) = delete;
  NcclOp& operator=(const NcclOp&) = delete;

  OpInfo info;
  bool host_blocking;          // barrier: wait() blocks the host like synchronize()
  bool observed = false;       // traced (diagnostics/trace.h): the watchdog records its wire and done phases
  gpuEvent_t ready = nullptr;  // on the caller's stream: the op's inputs are written
  gpuEvent_t start = nullptr;  // on the comm stream, before the NCCL call (timing)
  gpuEvent_t done = nullptr;   // on the comm stream, after it
};

// Polls `event` until it completes. Past timeout_s (> 0) aborts `comm` and throws StallError for
// `op`; when the communicator breaks meanwhile, throws its error.
void host_wait(gpuEvent_t event, const OpInfo& op, NcclComm& comm, double timeout_s);

class NcclWork : public Work {
 public:
  NcclWork(std::shared_ptr<NcclOp> op, std::shared_ptr<NcclComm> comm) : op_(std::move(op)), comm_(std::move(comm)) {}
  bool is_completed() override;
  void wait(uintptr_t stream, double timeout_s) override;
  void synchronize(double timeout_s) override;
  const OpInfo& info() const override { return op_->info; }

 private:
  std::shared_ptr<NcclOp> op_;
  std::shared_ptr<NcclComm> comm_;
};

}  // namespace pycomm::nccl
