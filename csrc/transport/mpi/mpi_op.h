// One MPI op on the queue: PYCOMM_DEBUG's signature check on the shadow communicator (prepare),
// GPU staging through pinned host memory when the MPI is not GPU-aware, the nonblocking MPI calls
// (start), MPI_Testall polling (test), then AVG's 1/size scaling and the copy back.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <vector>

#include "runtime/op_check.h"
#include "runtime/queued_op.h"
#include "transport/mpi/mpi_env.h"
#include "transport/mpi/gpu_staging.h"

namespace pycomm::mpi {

// The communicator handles an op needs; shared so ops never outlive them.
struct CommHandles {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm shadow = MPI_COMM_NULL;  // PYCOMM_DEBUG op matching; MPI_COMM_NULL when off
  MPI_Comm ring = MPI_COMM_NULL;    // private duplicate for ring_allreduce's point-to-point messages
  std::vector<char> ring_scratch;   // ring_allreduce's reused segment; only the queue thread touches it
  int rank = 0, size = 1;
  std::string label;
  // Collectives as blocking MPI calls on the queue thread (Open MPI's tuned algorithms, much faster
  // than its nonblocking ones for large messages) or as requests the queue polls
  // (PYCOMM_MPI_NONBLOCKING=1: a stalled queue can then be abandoned cleanly). Either way the waiter
  // enforces the stall deadline. Ops up to PYCOMM_INLINE_BYTES are always nonblocking calls (they
  // may run on the caller's thread, which must stay able to give up at the deadline).
  bool blocking = true;
};

// Posts one collective: blocking (`call()`) or nonblocking (`icall(&request)`, request queued).
template <typename Call, typename ICall>
void collective(bool blocking, std::vector<MPI_Request>& reqs, const char* what, Call call, ICall icall) {
  if (blocking) {
    check(call(), what);
    return;
  }
  reqs.emplace_back();
  check(icall(&reqs.back()), what);
}

class MpiOp : public QueuedOp {
 public:
  // `post` issues the op's calls on `in` / `out` (host copies when staged) and appends the requests
  // of nonblocking ones; `blocking`: collectives may be blocking calls (see CommHandles::blocking).
  // `avg_scale` != 0 multiplies `out` by it once complete.
  using Post = std::function<void(const Buffer& in, const Buffer& out, bool blocking, std::vector<MPI_Request>& reqs)>;
  MpiOp(OpInfo info, std::shared_ptr<const CommHandles> comm, Buffer in, Buffer out, Post post,
        double avg_scale, std::unique_ptr<GpuStaging> staging);
  ~MpiOp() override;

  // Host buffers only: GPU ones keep the progress thread (staging, or a GPU-aware MPI's device calls).
  bool can_run_inline() const override { return in_.device < 0 && out_.device < 0; }
  bool prepare() override;
  void start() override;
  bool test() override;

 private:
  std::shared_ptr<const CommHandles> comm_;
  Buffer in_, out_;
  Post post_;
  double avg_scale_;
  std::unique_ptr<GpuStaging> staging_;
  std::vector<MPI_Request> reqs_;
  bool checking_ = false;
  OpSignature sig_{};
  std::vector<int64_t> all_sigs_;
  MPI_Request check_req_ = MPI_REQUEST_NULL;
};

// An op that runs one blocking call on the queue once everything before it has completed.
class BlockingMpiOp : public QueuedOp {
 public:
  BlockingMpiOp(OpInfo info, std::function<void()> run) : QueuedOp(std::move(info)), run_(std::move(run)) {}
  bool needs_drain() const override { return true; }
  void start() override { run_(); }
  bool test() override { return true; }

 private:
  std::function<void()> run_;
};

}  // namespace pycomm::mpi
