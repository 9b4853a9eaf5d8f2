#include "transport/mpi/p2p_collective_op.h"

#include <algorithm>
#include <utility>

namespace pycomm::mpi {

P2pCollectiveOp::P2pCollectiveOp(OpInfo info, std::shared_ptr<CommHandles> comm)
    : QueuedOp(std::move(info)), comm_(std::move(comm)) {}

P2pCollectiveOp::~P2pCollectiveOp() {
  if (schedule_ && !done_)
    (void)work_.release();
  else if (work_)
    comm_->scratch->give_back(std::move(work_));
}

bool P2pCollectiveOp::fused() const { return info.bytes <= comm_->eager_bytes; }

void P2pCollectiveOp::run(const std::vector<P2pStep>& steps, std::vector<void*> bufs, MPI_Datatype type,
                          int64_t elem_size, MPI_Op op, int64_t segment_bytes) {
  // Ops in flight at once on CommHandles::allreduce are told apart by tag (as P2pAllreduceOp's):
  // collective_index is the same on every rank for the same op.
  const int64_t span = std::min(comm_->tag_ub, 1 << 20);
  const int tag = static_cast<int>(std::max<int64_t>(info.collective_index, 0) % span);
  schedule_ = std::make_unique<P2pSchedule>(steps, std::move(bufs), type, elem_size, op, comm_->allreduce, tag,
                                            *comm_->scratch, segment_bytes);
}

void P2pCollectiveOp::post_ready() {
  if (schedule_) schedule_->post_ready(info.name.c_str());
}

char* P2pCollectiveOp::work_buffer(size_t bytes) {
  work_ = comm_->scratch->take(bytes);
  return work_->data();
}

bool P2pCollectiveOp::test() {
  if (schedule_ && !schedule_->poll(info.name.c_str())) return false;
  done_ = true;
  finish();
  return true;
}

}  // namespace pycomm::mpi
