#include "transport/mpi/allgather_op.h"

#include <cstring>

#include "transport/mpi/allgather_schedules.h"

namespace pycomm::mpi {

P2pAllgatherOp::P2pAllgatherOp(OpInfo info, std::shared_ptr<CommHandles> comm, Buffer out, Buffer in)
    : P2pCollectiveOp(std::move(info), std::move(comm)), out_(out), in_(in) {
  const int64_t block = block_bytes();
  this->info.algorithm = fused() ? kInOpMatching : allgather_algorithm(comm_->size);
  if (!fused() || block == 0) return;
  matching_.fuse_blocks(SignatureExchange::Blocks::kGather, in_.ptr, out_.ptr, comm_->size, block, block, MPI_BYTE,
                        MPI_OP_NULL);
}

void P2pAllgatherOp::start() {
  const int64_t block = block_bytes();
  if (fused() || block == 0) return;
  // The first step sends this rank's own block (both schedules): from the input, so the copy of it
  // into the output overlaps the wire instead of delaying it (2 ranks, 1 MiB: 85 -> 67 us; mpi4py 49 us).
  char* own = static_cast<char*>(out_.ptr) + block * comm_->rank;
  std::vector<P2pStep> steps = allgather_steps(even_bounds(block * comm_->size, comm_->size), comm_->rank, comm_->size);
  const bool first_sends_own =
      !steps.empty() && steps.front().send_begin == block * comm_->rank && steps.front().send_count == block;
  // memmove: the input may be the output's own block (in place).
  if (!first_sends_own) {  // one rank, or a schedule that would read the output's own block first
    std::memmove(own, in_.ptr, static_cast<size_t>(block));
    run(steps, {out_.ptr}, MPI_BYTE, 1, MPI_OP_NULL, kCopySegmentBytes);
    return;
  }
  steps.front().send_buf = 1;
  steps.front().send_begin = 0;
  run(steps, {out_.ptr, in_.ptr}, MPI_BYTE, 1, MPI_OP_NULL, kCopySegmentBytes);
  post_ready();
  // Later steps, which send the own block from the output, start only once the first one finished
  // (the next poll), after this copy.
  std::memmove(own, in_.ptr, static_cast<size_t>(block));
}

}  // namespace pycomm::mpi
