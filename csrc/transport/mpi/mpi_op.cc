#include "transport/mpi/mpi_op.h"

#include "host/scale.h"
#include "queue/inline_run.h"
#include "transport/mpi/mpi_env.h"

namespace pycomm::mpi {

MpiOp::MpiOp(OpInfo info, std::shared_ptr<const CommHandles> comm, Buffer in, Buffer out, Post post, double avg_scale,
             std::unique_ptr<GpuStaging> staging)
    : QueuedOp(std::move(info)),
      comm_(std::move(comm)),
      in_(in),
      out_(out),
      post_(std::move(post)),
      avg_scale_(avg_scale),
      staging_(std::move(staging)) {}

MpiOp::~MpiOp() {
  // Abandoned with requests still pending (a broken communicator): MPI may still write into the
  // staging memory, so it must not be reused.
  bool pending = matching_.pending();
  for (MPI_Request r : reqs_) pending = pending || r != MPI_REQUEST_NULL;
  if (pending && staging_) staging_->leak();
}

bool MpiOp::prepare() {
  if (!info.collective) return true;
  return matching_.poll(info, *comm_);
}

bool MpiOp::can_run_inline() const { return in_.device < 0 && out_.device < 0 && fits_inline(info.bytes); }

bool MpiOp::posts_blocking() const { return comm_->blocking && !fits_inline(info.bytes); }

void MpiOp::start() {
  Buffer in = in_, out = out_;
  if (staging_) {
    staging_->to_host();
    in = staging_->host_in();
    out = staging_->host_out();
  }
  // Small ops post nonblocking calls wherever they run: they may run on the caller's thread on one
  // rank and on the queue on another, and MPI never matches a nonblocking collective with a blocking one.
  post_(in, out, posts_blocking(), reqs_);
}

bool MpiOp::test() {
  int done = 1;
  if (!reqs_.empty())
    check(MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &done, MPI_STATUSES_IGNORE), info.name.c_str());
  if (!done) return false;
  if (avg_scale_ != 0) {  // where MPI wrote the sum: pinned host memory, or the device buffer itself
    Buffer h = staging_ ? staging_->host_out() : out_;
    if (h.device >= 0)
      scale_device(h, avg_scale_);
    else
      scale_host(h.ptr, h.count, h.dtype, avg_scale_);
  }
  if (staging_) staging_->to_device();
  return true;
}

}  // namespace pycomm::mpi
