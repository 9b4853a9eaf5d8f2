// pycomm's own all-reduce of a host buffer on MPI point-to-point messages, polled with MPI_Test:
// nothing in it blocks, so it runs on the caller's thread at any size when the queue is idle (no
// hand-off to the progress thread, which then sleeps instead of competing with the ranks for
// cores) and still gives up at the stall deadline. Both paths run the same messages for the same op.
//   - up to kFusedAllreduceBytes the data travels with op matching (signature_exchange.h): recursive
//     doubling, log2(size) message rounds for the whole op;
//   - larger ones are matched first, then run allreduce_schedules.h's steps on CommHandles::allreduce.
// GPU buffers keep MpiOp (MPI_Allreduce, or staged through pinned host memory).
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

// Recursive doubling sends the whole buffer log2(size) times, Rabenseifner 2 (size - 1) / size of it in
// twice as many rounds. Measured on 2 and 4 ranks of one node (2 cores, loaded): at 64 KiB Rabenseifner
// takes 24 us against 29.5 us fused on 2 ranks (69 against 81 us on 4); at 32 KiB fused is ahead on 2
// ranks (15.6 against 16.5 us). Fixed: every rank must choose the same way.
constexpr int64_t kFusedAllreduceBytes = int64_t{32} << 10;

class P2pAllreduceOp : public QueuedOp {
 public:
  // `avg_scale` != 0 multiplies the result by it (AVG).
  P2pAllreduceOp(OpInfo info, std::shared_ptr<CommHandles> comm, Buffer buf, MPI_Datatype type, MPI_Op op,
                 double avg_scale);
  bool can_run_inline() const override { return true; }
  bool prepare() override;  // op matching; small ops' whole exchange
  void start() override;    // larger ops: their schedules, one per chunk of at most INT_MAX elements
  bool test() override;

 private:
  std::shared_ptr<CommHandles> comm_;
  Buffer buf_;
  MPI_Datatype type_;
  MPI_Op op_;
  double avg_scale_;
  SignatureExchange matching_;
  std::vector<std::unique_ptr<P2pSchedule>> chunks_;  // run one after another
  size_t chunk_ = 0;
};

}  // namespace pycomm::mpi
