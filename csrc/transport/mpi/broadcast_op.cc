#include "transport/mpi/broadcast_op.h"

#include <cstring>

#include "transport/mpi/broadcast_schedules.h"

namespace pycomm::mpi {

P2pBroadcastOp::P2pBroadcastOp(OpInfo info, std::shared_ptr<CommHandles> comm, Buffer buf, int root)
    : P2pCollectiveOp(std::move(info), std::move(comm)), buf_(buf), root_(root) {
  const int64_t bytes = buf_.count * static_cast<int64_t>(dtype_size(buf_.dtype));
  this->info.algorithm = fused() ? kInOpMatching : broadcast_algorithm(bytes, comm_->size, comm_->oversubscribed);
  if (!fused() || bytes == 0) return;
  void* mine = buf_.ptr;  // the root's result is its own bytes: in place
  if (comm_->rank != root_) {
    received_.assign(static_cast<size_t>(bytes), 0);
    mine = received_.data();
  }
  matching_.fuse(mine, bytes, MPI_BYTE, MPI_BOR, bytes);
}

void P2pBroadcastOp::start() {
  if (fused() || comm_->size == 1) return;
  const int64_t bytes = buf_.count * static_cast<int64_t>(dtype_size(buf_.dtype));
  run(broadcast_steps(bytes, comm_->rank, comm_->size, root_, comm_->oversubscribed), {buf_.ptr}, MPI_BYTE, 1,
      MPI_OP_NULL, kCopySegmentBytes);
}

void P2pBroadcastOp::finish() {
  if (!received_.empty()) std::memcpy(buf_.ptr, received_.data(), received_.size());
}

}  // namespace pycomm::mpi
