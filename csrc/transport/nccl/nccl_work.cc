#include "transport/nccl/nccl_work.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/errors.h"
#include "diagnostics/nvtx.h"

namespace pycomm::nccl {

NcclOp::NcclOp(OpInfo info_, bool host_blocking_) : info(std::move(info_)), host_blocking(host_blocking_) {
  PYCOMM_GPU_CHECK(gpuEventCreateWithFlags(&ready, gpuEventDisableTiming));
  PYCOMM_GPU_CHECK(gpuEventCreateWithFlags(&start, gpuEventDefault));
  PYCOMM_GPU_CHECK(gpuEventCreateWithFlags(&done, gpuEventDefault));
}

NcclOp::~NcclOp() {
  for (gpuEvent_t e : {ready, start, done})
    if (e) gpuEventDestroy(e);
}

void host_wait(gpuEvent_t event, const OpInfo& op, NcclComm& comm, double timeout_s) {
  using Clock = std::chrono::steady_clock;
  const auto begin = Clock::now();
  auto nap = std::chrono::microseconds(20);
  for (;;) {
    gpuError_t r = gpuEventQuery(event);
    // After an abort, "complete" may only mean the kernels were ended: raise the abort's cause.
    if (comm.aborted()) comm.throw_if_broken(op.name.c_str());
    if (r == gpuSuccess) return;
    if (r != gpuErrorNotReady)
      throw PycommError(op.describe() + ": " PYCOMM_GPU_RUNTIME " error while waiting: " + gpuGetErrorString(r));
    if (timeout_s > 0 && Clock::now() - begin > std::chrono::duration<double>(timeout_s))
      throw StallError(comm.abort_for_stall(op, timeout_s));
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(1000));
  }
}

bool NcclWork::is_completed() {
  gpuError_t r = gpuEventQuery(op_->done);
  if (r == gpuSuccess) return true;
  if (r == gpuErrorNotReady) return false;
  throw PycommError(op_->info.describe() + ": " PYCOMM_GPU_RUNTIME " error: " + gpuGetErrorString(r));
}

void NcclWork::wait(uintptr_t stream, double timeout_s) {
  if (op_->host_blocking) return synchronize(timeout_s);
  if (comm_->aborted()) comm_->throw_if_broken(op_->info.name.c_str());
  PYCOMM_GPU_CHECK(gpuStreamWaitEvent(reinterpret_cast<gpuStream_t>(stream), op_->done, 0));
}

void NcclWork::synchronize(double timeout_s) {
  NvtxScope range("wait ", op_->info);
  host_wait(op_->done, op_->info, *comm_, timeout_s);
}

}  // namespace pycomm::nccl
