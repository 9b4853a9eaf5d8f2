// The MPI communicators and shared state that one MPI transport's ops use; shared so that ops
// never outlive them.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "transport/mpi/p2p_matching.h"

namespace pycomm::mpi {

struct CommHandles {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm check = MPI_COMM_NULL;   // op matching before every collective (runtime/op_check.h)
  MPI_Comm ring = MPI_COMM_NULL;    // private duplicate for ring_allreduce's point-to-point messages
  std::vector<char> ring_scratch;   // ring_allreduce's reused segment; only the queue thread touches it
  RecvOrder recv_order;   // point-to-point matching (p2p_matching.h)
  std::mutex p2p_mu;
  HeaderStash stash;
  int tag_ub = 32767;     // the MPI_TAG_UB attribute of `comm`
  int rank = 0, size = 1;
  std::string label;
  // Collectives as blocking MPI calls on the queue thread (Open MPI's tuned algorithms, much faster
  // than its nonblocking ones for large messages) or as requests the queue polls
  // (PYCOMM_MPI_NONBLOCKING=1: a stalled queue can then be abandoned cleanly). Either way the waiter
  // enforces the stall deadline. Ops up to PYCOMM_INLINE_BYTES are always nonblocking calls (they
  // may run on the caller's thread, which must stay able to give up at the deadline).
  bool blocking = true;
  // Op matching as one blocking MPI_Allgather (blocking collectives, caller-thread path off) or as a
  // polled MPI_Iallgather. The same for every op of the communicator: ranks that disagree on an op's
  // size must still run the same kind of exchange (MPI never matches a blocking collective with a
  // nonblocking one), so it cannot depend on the op as PYCOMM_INLINE_BYTES does.
  bool blocking_checks = true;
};

}  // namespace pycomm::mpi
