#include "transport/nccl/nccl_watchdog.h"

#include <cstdio>

#include "diagnostics/stats.h"

namespace pycomm::nccl {
namespace {
constexpr auto kPollInterval = std::chrono::milliseconds(5);
}  // namespace

NcclWatchdog::NcclWatchdog(std::shared_ptr<NcclComm> comm, int device) : comm_(std::move(comm)), device_(device) {
  thread_ = std::thread([this] { loop(); });
}

NcclWatchdog::~NcclWatchdog() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void NcclWatchdog::track(std::shared_ptr<NcclOp> op, double timeout_s) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    pending_.push_back({std::move(op), timeout_s, Clock::now()});
  }
  cv_.notify_all();
}

void NcclWatchdog::loop() {
  gpuSetDevice(device_);  // event queries and timings of this communicator's device
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    if (pending_.empty()) {
      cv_.wait(lk, [&] { return stop_ || !pending_.empty(); });
      continue;
    }
    lk.unlock();
    bool healthy = poll();
    lk.lock();
    if (!healthy) pending_.clear();
    cv_.wait_for(lk, kPollInterval, [&] { return stop_; });
  }
}

void NcclWatchdog::finish(const Entry& e) {
  const OpInfo& info = e.op->info;
  float ms = 0;
  if (gpuEventElapsedTime(&ms, e.op->start, e.op->done) != gpuSuccess) ms = 0;
  stats_record(info.name, info.bytes, static_cast<double>(info.bytes) * info.bus_factor, ms * 1e-3);
  if (e.op->observed) {  // the host learns of the completion up to a poll interval late: the GPU's time places it
    const int64_t seen = trace_now_ns();
    const TraceComm& comm = comm_->health().trace_comm();
    trace_op(info, comm, TracePhase::kWire, seen - static_cast<int64_t>(ms * 1e6));
    trace_op(info, comm, TracePhase::kDone, seen);
  }
  comm_->health().note_finished(info.seq);
}

bool NcclWatchdog::poll() {
  if (comm_->health().broken()) return false;
  ncclResult_t async = comm_->async_error();
  if (async != ncclSuccess && async != ncclInProgress) {
    std::string msg = std::string("asynchronous NCCL error on the ") + comm_->health().label() + ": " +
                      ncclGetErrorString(async) + " (a peer died or the network failed); aborted the communicator";
    std::fprintf(stderr, "pycomm: %s\n", msg.c_str());
    comm_->abort(msg);
    return false;
  }
  // Ops complete in stream order: finish from the front until the first one still running.
  for (;;) {
    Entry front;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (pending_.empty()) return true;
      front = pending_.front();
    }
    gpuError_t r = gpuEventQuery(front.op->done);
    if (r == gpuErrorNotReady) {
      if (front.timeout_s > 0 && Clock::now() - front.submitted > std::chrono::duration<double>(front.timeout_s)) {
        std::string msg = comm_->abort_for_stall(front.op->info, front.timeout_s);
        std::fprintf(stderr, "pycomm: stall error (raised by the next pycomm call on this communicator): %s\n",
                     msg.c_str());
        return false;
      }
      return true;
    }
    if (r == gpuSuccess) finish(front);
    // Any other error is the waiter's to report (Work::synchronize); stop following this op.
    std::lock_guard<std::mutex> lk(mu_);
    pending_.pop_front();
  }
}

}  // namespace pycomm::nccl
