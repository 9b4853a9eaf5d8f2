// What pycomm's own host broadcast, all-gather and reduce-scatter (broadcast_op.h, allgather_op.h,
// reduce_scatter_op.h) share with its all-reduce (allreduce_op.h): op matching first
// (signature_exchange.h), small ops' data riding in it, larger ones one polled P2pSchedule on
// CommHandles::allreduce. Nothing blocks inside MPI, so they run on the caller's thread at any size
// (no hand-off to the progress thread) and still give up at the stall deadline.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "queue/queued_op.h"
#include "transport/mpi/comm_handles.h"
#include "transport/mpi/p2p_schedule.h"
#include "transport/mpi/signature_exchange.h"

namespace pycomm::mpi {

class P2pCollectiveOp : public QueuedOp {
 public:
  P2pCollectiveOp(OpInfo info, std::shared_ptr<CommHandles> comm);
  ~P2pCollectiveOp() override;  // abandoned mid-schedule: the work buffer is leaked (MPI may still use it)
  bool can_run_inline() const override { return true; }
  bool prepare() override { return matching_.poll(info, *comm_); }
  bool test() override;  // polls the schedule, then finish()

 protected:
  // Ops of at most CommHandles::eager_bytes (PYCOMM_EAGER_BYTES, the same on every rank) carry their data
  // in op matching (every rank decides alike: the size is part of the matched signature); it lands in the
  // exchange's own buffer and reaches the caller's only once every signature and size agreed. The
  // subclass calls matching_.fuse() or fuse_blocks() then.
  bool fused() const;
  // Runs `steps` on `bufs` (P2pStep's buffer indexes) as the op's schedule, once matched (start()).
  // `segment_bytes`: P2pSchedule's (the same on every rank: it depends on the op's kind only).
  void run(const std::vector<P2pStep>& steps, std::vector<void*> bufs, MPI_Datatype type, int64_t elem_size, MPI_Op op,
           int64_t segment_bytes = kSegmentBytes);
  // Posts what the schedule can start at once (P2pSchedule::post_ready): local work after it overlaps.
  void post_ready();
  char* work_buffer(size_t bytes);  // scratch kept for the op's lifetime (from the communicator's pool)
  virtual void finish() {}          // after the data is in: AVG's scaling, a lone rank's copy

  std::shared_ptr<CommHandles> comm_;
  SignatureExchange matching_;

 private:
  std::unique_ptr<P2pSchedule> schedule_;
  ScratchPool::Block work_;
  bool done_ = false;
};

}  // namespace pycomm::mpi
