// The MPI communicators and shared state that one MPI transport's ops use; shared so that ops
// never outlive them.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/settings.h"
#include "transport/mpi/p2p_matching.h"
#include "transport/mpi/scratch_pool.h"

namespace pycomm::mpi {

struct CommHandles {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm check = MPI_COMM_NULL;      // op matching before every collective (diagnostics/op_check.h)
  MPI_Comm allreduce = MPI_COMM_NULL;  // private duplicate for the host schedules (allreduce_op.h, p2p_collective_op.h)
  std::shared_ptr<ScratchPool> scratch = std::make_shared<ScratchPool>();  // their receive buffers
  RecvOrder recv_order;                                                    // point-to-point matching (p2p_matching.h)
  std::mutex p2p_mu;
  HeaderStash stash;
  int tag_ub = 32767;  // the MPI_TAG_UB attribute of `comm`
  int rank = 0, size = 1;
  // Some node of this communicator runs more ranks than the cores they may use (PYCOMM_OVERSUBSCRIBED);
  // the same on every rank, so schedules may key on it.
  bool oversubscribed = false;
  // PYCOMM_EAGER_BYTES when the communicator was made (agreed by every rank): broadcasts, all-gathers and
  // reduce-scatters up to it carry their data in op matching (p2p_collective_op.h).
  int64_t eager_bytes = kEagerBytesDefault;
  std::string label;
  // MPI collectives other than host all-reduces (allreduce_op.h: point-to-point, always polled) as
  // blocking calls on the queue thread (Open MPI's tuned algorithms, much faster than its nonblocking
  // ones for large messages) or as requests the queue polls (PYCOMM_MPI_NONBLOCKING=1: a stalled
  // queue can then be abandoned cleanly). Either way the waiter enforces the stall deadline. Ops up
  // to PYCOMM_INLINE_BYTES are always nonblocking calls (they may run on the caller's thread, which
  // must stay able to give up at the deadline).
  bool blocking = true;
  // One-way broadcasts (signature_exchange.h): a digest of the signatures of every one this rank took
  // part in, in order, compared at every op matching (a root's mismatch its receivers could not see
  // shows up there); and whether this rank was the root of one (a receiver's refusal may come back).
  mutable std::atomic<uint64_t> one_way_digest{0};
  mutable std::atomic<bool> rooted_one_way{false};
};

}  // namespace pycomm::mpi
