// pycomm's own reduce-scatter of host buffers on MPI point-to-point messages (p2p_collective_op.h):
// up to the fused size the input is reduced in op matching (in its own buffer; SignatureExchange::fuse_blocks:
// recursive halving on a power-of-two communicator) and this rank's block written once all matched; larger ones run
// reduce_scatter_schedules.h's steps from the input, through a work buffer, into the output. The input is never
// written. GPU buffers keep MpiOp (MPI_Reduce_scatter_block, or staged through pinned host memory).
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "transport/mpi/p2p_collective_op.h"

namespace pycomm::mpi {

class P2pReduceScatterOp : public P2pCollectiveOp {
 public:
  // `avg_scale` != 0 multiplies the result by it (AVG).
  P2pReduceScatterOp(OpInfo info, std::shared_ptr<CommHandles> comm, Buffer out, Buffer in, MPI_Datatype type,
                     MPI_Op op, double avg_scale);
  void start() override;

 private:
  void finish() override;
  int64_t block_bytes() const { return out_.count * static_cast<int64_t>(dtype_size(out_.dtype)); }

  Buffer out_, in_;
  MPI_Datatype type_;
  MPI_Op op_;
  double avg_scale_;
};

}  // namespace pycomm::mpi
