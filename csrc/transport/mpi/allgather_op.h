// pycomm's own all-gather of host buffers on MPI point-to-point messages (p2p_collective_op.h): up to
// the fused size the blocks travel with op matching (SignatureExchange::fuse_blocks: each message the
// blocks its sender knows, on a power-of-two communicator); larger ones copy the input into place and run
// allgather_schedules.h's steps on the output.
// GPU buffers keep MpiOp (MPI_Allgather, or staged through pinned host memory).
#pragma once

#include <memory>
#include <vector>

#include "transport/mpi/p2p_collective_op.h"

namespace pycomm::mpi {

class P2pAllgatherOp : public P2pCollectiveOp {
 public:
  P2pAllgatherOp(OpInfo info, std::shared_ptr<CommHandles> comm, Buffer out, Buffer in);
  void start() override;

 private:
  int64_t block_bytes() const { return in_.count * static_cast<int64_t>(dtype_size(in_.dtype)); }

  Buffer out_, in_;
};

}  // namespace pycomm::mpi
