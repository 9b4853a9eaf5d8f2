#include "transport/nccl/nccl_comm.h"

#include <chrono>
#include <thread>

#include "common/errors.h"
#include "diagnostics/stall.h"

namespace pycomm::nccl {
namespace {
constexpr const char* kStallPrefix = "stall: ";  // how diagnostics/stall.cc marks a stall in CommHealth
// How long abort() waits for a call in progress to return before aborting underneath it.
constexpr auto kAbortGrace = std::chrono::seconds(2);
}  // namespace

NcclComm::NcclComm(ncclComm_t comm, std::shared_ptr<CommHealth> health) : health_(std::move(health)), comm_(comm) {}

NcclComm::~NcclComm() {
  std::lock_guard<std::mutex> lk(state_mu_);
  abort_now();
}

void NcclComm::abort_now() {
  if (released_) return;
  released_ = true;
  aborted_ = true;
  ncclCommAbort(comm_);
}

bool NcclComm::aborted() const {
  std::lock_guard<std::mutex> lk(state_mu_);
  return aborted_;
}

ncclComm_t NcclComm::usable(const char* what) {
  throw_if_broken(what);
  std::lock_guard<std::mutex> lk(state_mu_);
  if (released_) throw PycommError(std::string(what) + ": the " + health_->label() + " was shut down");
  return comm_;
}

void NcclComm::check(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return;
  std::string detail;
  {
    std::lock_guard<std::mutex> lk(state_mu_);
    if (!released_) {
      const char* last = ncclGetLastError(comm_);
      if (last && *last) detail = std::string(" (") + last + ")";
    }
  }
  std::string msg =
      std::string(what) + ": NCCL error on the " + health_->label() + ": " + ncclGetErrorString(r) + detail;
  // Bad arguments leave the communicator usable; anything else leaves ranks out of step, so end
  // its kernels now (the caller holds call_mu_, so no other call is in NCCL).
  if (r != ncclInvalidArgument && r != ncclInvalidUsage) {
    health_->mark_broken(msg);
    std::lock_guard<std::mutex> lk(state_mu_);
    abort_now();
  }
  throw PycommError(msg);
}

void NcclComm::throw_if_broken(const char* what) const {
  if (!health_->broken()) return;
  std::string reason = health_->broken_reason();
  if (reason.rfind(kStallPrefix, 0) == 0) throw StallError(reason.substr(std::char_traits<char>::length(kStallPrefix)));
  health_->check_usable(what);
}

void NcclComm::abort(const std::string& reason) {
  health_->mark_broken(reason);
  // Prefer aborting between calls; a call hung inside NCCL (e.g. waiting for a peer) is exactly
  // what ncclCommAbort exists to interrupt, so after a grace period abort underneath it.
  std::unique_lock<std::mutex> call(call_mu_, std::defer_lock);
  auto until = std::chrono::steady_clock::now() + kAbortGrace;
  while (!call.try_lock() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::lock_guard<std::mutex> lk(state_mu_);
  abort_now();
}

std::string NcclComm::abort_for_stall(const OpInfo& op, double timeout_s) {
  std::string msg = stall_message(op, timeout_s, *health_);
  msg += stall_hook_suffix(msg, *health_);  // the flight recorder, before the abort ends the peers' ops
  abort(kStallPrefix + msg);
  return msg;
}

void NcclComm::destroy() {
  std::lock_guard<std::mutex> call(call_mu_);
  std::lock_guard<std::mutex> lk(state_mu_);
  if (released_) return;
  released_ = true;
  ncclCommDestroy(comm_);
}

ncclResult_t NcclComm::async_error() {
  std::lock_guard<std::mutex> lk(state_mu_);
  if (released_) return ncclSuccess;
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
  return r != ncclSuccess ? r : state;
}

}  // namespace pycomm::nccl
