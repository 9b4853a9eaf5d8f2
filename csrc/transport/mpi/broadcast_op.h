// pycomm's own broadcast of a host buffer on MPI point-to-point messages (p2p_collective_op.h): up to
// the fused size matched one way (signature_exchange.h: the root sends its signature with its bytes and
// returns without waiting for the others'); larger ones are matched on every rank, then run
// broadcast_schedules.h's steps.
// GPU buffers keep MpiOp (MPI_Bcast, or staged through pinned host memory).
#pragma once

#include <memory>

#include "transport/mpi/p2p_collective_op.h"

namespace pycomm::mpi {

class P2pBroadcastOp : public P2pCollectiveOp {
 public:
  P2pBroadcastOp(OpInfo info, std::shared_ptr<CommHandles> comm, Buffer buf, int root);
  void start() override;

 private:
  Buffer buf_;
  int root_;
};

}  // namespace pycomm::mpi
