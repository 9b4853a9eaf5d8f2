// One MPI op on the queue: op matching of collectives on the check communicator (prepare),
// GPU staging through pinned host memory when the MPI is not GPU-aware, the nonblocking MPI calls
// (start), MPI_Testall polling (test), then AVG's 1/size scaling and the copy back.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <vector>

#include "queue/queued_op.h"
#include "transport/mpi/comm_handles.h"
#include "transport/mpi/gpu_staging.h"
#include "transport/mpi/mpi_env.h"
#include "transport/mpi/signature_exchange.h"

namespace pycomm::mpi {

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
  MpiOp(OpInfo info, std::shared_ptr<const CommHandles> comm, Buffer in, Buffer out, Post post, double avg_scale,
        std::unique_ptr<GpuStaging> staging);
  ~MpiOp() override;

  // Host buffers up to PYCOMM_INLINE_BYTES only: GPU ones keep the progress thread (staging, or a
  // GPU-aware MPI's device calls), and so do larger ops (blocking MPI calls).
  bool can_run_inline() const override;
  bool prepare() override;
  void start() override;
  bool test() override;

 protected:
  void set_post(Post post) { post_ = std::move(post); }  // for subclasses whose post needs their own state

 private:
  // Collectives as blocking calls (CommHandles::blocking) unless the op may run on its caller's thread.
  bool posts_blocking() const;

  std::shared_ptr<const CommHandles> comm_;
  Buffer in_, out_;
  Post post_;
  double avg_scale_;
  std::unique_ptr<GpuStaging> staging_;
  std::vector<MPI_Request> reqs_;
  SignatureExchange matching_;
};

// A collective that runs one blocking call on the queue (split) once everything before it has
// completed, after op matching.
class BlockingMpiOp : public QueuedOp {
 public:
  BlockingMpiOp(OpInfo info, std::shared_ptr<const CommHandles> comm, std::function<void()> run)
      : QueuedOp(std::move(info)), comm_(std::move(comm)), run_(std::move(run)) {}
  bool needs_drain() const override { return true; }
  bool prepare() override { return matching_.poll(info, *comm_); }
  void start() override { run_(); }
  bool test() override { return true; }

 private:
  std::shared_ptr<const CommHandles> comm_;
  std::function<void()> run_;
  SignatureExchange matching_;
};

}  // namespace pycomm::mpi
