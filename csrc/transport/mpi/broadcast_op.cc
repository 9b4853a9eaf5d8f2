#include "transport/mpi/broadcast_op.h"

#include "transport/mpi/broadcast_schedules.h"

namespace pycomm::mpi {

P2pBroadcastOp::P2pBroadcastOp(OpInfo info, std::shared_ptr<CommHandles> comm, Buffer buf, int root)
    : P2pCollectiveOp(std::move(info), std::move(comm)), buf_(buf), root_(root) {
  const int64_t bytes = buf_.count * static_cast<int64_t>(dtype_size(buf_.dtype));
  this->info.algorithm = fused() ? kInOpMatching : broadcast_algorithm(bytes, comm_->size, comm_->oversubscribed);
  if (!fused()) return;
  // Matched one way, the root's bytes in its message; they reach a receiver's buffer once matched.
  // A scheduled one keeps symmetric matching: a root whose receivers refused would wait in its schedule.
  matching_.one_way(root_);
  if (bytes > 0) matching_.fuse(buf_.ptr, bytes, MPI_BYTE, MPI_OP_NULL, bytes);
}

void P2pBroadcastOp::start() {
  if (fused() || comm_->size == 1) return;
  const int64_t bytes = buf_.count * static_cast<int64_t>(dtype_size(buf_.dtype));
  run(broadcast_steps(bytes, comm_->rank, comm_->size, root_, comm_->oversubscribed), {buf_.ptr}, MPI_BYTE, 1,
      MPI_OP_NULL, kCopySegmentBytes);
}

}  // namespace pycomm::mpi
