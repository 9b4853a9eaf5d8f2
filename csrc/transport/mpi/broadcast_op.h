// pycomm's own broadcast of a host buffer on MPI point-to-point messages (p2p_collective_op.h): up
// to the fused size the root's bytes travel with op matching (an all-reduce with bitwise OR, where
// the other ranks contribute zeros); larger ones run broadcast_schedules.h's steps.
// GPU buffers keep MpiOp (MPI_Bcast, or staged through pinned host memory).
#pragma once

#include <memory>
#include <vector>

#include "transport/mpi/p2p_collective_op.h"

namespace pycomm::mpi {

class P2pBroadcastOp : public P2pCollectiveOp {
 public:
  P2pBroadcastOp(OpInfo info, std::shared_ptr<CommHandles> comm, Buffer buf, int root);
  void start() override;

 private:
  void finish() override;

  Buffer buf_;
  int root_;
  std::vector<char> received_;  // fused, not the root: zeros in, the root's bytes out
};

}  // namespace pycomm::mpi
