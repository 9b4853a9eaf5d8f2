// A collective as a fixed list of point-to-point steps on one buffer, run by polling: each step
// sends a range of the buffer to one rank and receives a range from one rank, cut into messages of
// at most kSegmentBytes (straight into the
// buffer, or into scratch and then reduced into it with MPI_Reduce_local, which covers pycomm's
// 16-bit float ops), and starts once the step before it finished. Out-of-place collectives address
// several buffers (the input, a work copy, the output): each range names its buffer. Nonblocking calls only
// (MPI_Isend / MPI_Irecv / MPI_Testall), so the caller's thread can run it and still give up at the
// stall deadline. allreduce_schedules.h builds the steps.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "transport/mpi/scratch_pool.h"

namespace pycomm::mpi {

// Largest message: Open MPI's shared-memory transport moved one 4 MiB message 20x slower than 16 of
// 256 KiB each (measured, 2 ranks of this node), and each piece is reduced while it is still in cache.
constexpr int64_t kSegmentBytes = int64_t{256} << 10;
// Largest message of a schedule that only copies (broadcast, all-gather: nothing to reduce while it is
// in cache): fewer rendezvous per byte. 2 ranks, 1 MiB broadcast: 68-74 us at 256 KiB, 58-70 us at 1 MiB
// (mpi4py 48-57 us); on 4 ranks of 2 cores the sweep was too noisy to rank the sizes.
constexpr int64_t kCopySegmentBytes = int64_t{1} << 20;

// Schedule names: the *_algorithm() functions of the *_schedules.h files return one of these (the
// *_steps() functions compare the pointers), and ops put them in OpInfo::algorithm for traces.
inline constexpr const char* kNoSchedule = "none";
inline constexpr const char* kRing = "ring";
inline constexpr const char* kRabenseifner = "rabenseifner";
inline constexpr const char* kRecursiveDoubling = "recursive_doubling";
inline constexpr const char* kRecursiveHalving = "recursive_halving";
inline constexpr const char* kBinomialTree = "binomial_tree";
inline constexpr const char* kScatterAllgather = "scatter_allgather";
// Small ops whose data rides in op matching's recursive-doubling messages (signature_exchange.h).
inline constexpr const char* kInOpMatching = "in_op_matching";

struct P2pStep {
  int send_to = -1;                        // -1: nothing to send
  int64_t send_begin = 0, send_count = 0;  // elements of the buffer
  int recv_from = -1;                      // -1: nothing to receive
  int64_t recv_begin = 0, recv_count = 0;
  bool reduce = false;             // receive into scratch, then reduce into the buffer's range
  int group = 0;                   // the step a message belongs to (messages of one step may be in flight together)
  int send_buf = 0, recv_buf = 0;  // which of the schedule's buffers the ranges address
  // >= 0 (instead of `reduce`): receive straight into place, then reduce this buffer's range of the
  // same length at combine_begin into it (received op mine: the reduce ops are commutative).
  int combine_buf = -1;
  int64_t combine_begin = 0;
};

class P2pSchedule {
 public:
  // `buf`: the elements the steps address (counts of a step <= INT_MAX); messages go on `comm` with
  // `tag`, which no other op in flight on `comm` may use. `pool` lends the scratch (returned when done).
  P2pSchedule(const std::vector<P2pStep>& steps, void* buf, MPI_Datatype type, int64_t elem_size, MPI_Op op,
              MPI_Comm comm, int tag, ScratchPool& pool);
  // Steps over several buffers (P2pStep::send_buf, recv_buf, combine_buf index `bufs`), cut into messages
  // of at most `segment_bytes` (every rank of the op must pass the same: both ends cut alike).
  P2pSchedule(const std::vector<P2pStep>& steps, std::vector<void*> bufs, MPI_Datatype type, int64_t elem_size,
              MPI_Op op, MPI_Comm comm, int tag, ScratchPool& pool, int64_t segment_bytes = kSegmentBytes);
  ~P2pSchedule();  // requests still pending (abandoned): the scratch is leaked, MPI may still write it
  P2pSchedule(const P2pSchedule&) = delete;
  P2pSchedule& operator=(const P2pSchedule&) = delete;

  // Posts and polls the steps; true once the last one finished. `what` names the op in MPI errors.
  bool poll(const char* what);
  // Posts the messages that need nothing finished first (the first step's, up to the window), so that
  // local work done before the next poll() overlaps them.
  void post_ready(const char* what);

 private:
  // Messages in flight at once. Idle cores: 4, so that each received piece is reduced while it is still
  // in cache. More ranks than cores, or more runnable threads than CPUs (queue/spin.h): every message of
  // a step, so that a rank's partner moves all of it whenever it gets a core, instead of once per window.
  // Schedules that only copy (no scratch to keep in cache) always take the wide window: the receiver
  // then finds the next message announced when it finishes one (2 ranks, idle: 16 MiB all-gather
  // 0.89-0.92x -> 0.97-0.98x mpi4py, 64 MiB 0.90-0.96x -> 0.97-0.98x; broadcast unchanged).
  static constexpr size_t kWindow = 4;
  static constexpr size_t kOversubscribedWindow = 64;
  void post(size_t i, const char* what);
  char* at(int b, int64_t elem) const { return static_cast<char*>(bufs_[static_cast<size_t>(b)]) + elem * elem_size_; }

  std::vector<P2pStep> steps_;
  std::vector<void*> bufs_;
  MPI_Datatype type_;
  int64_t elem_size_;
  MPI_Op op_;
  MPI_Comm comm_;
  int tag_;
  ScratchPool& pool_;
  ScratchPool::Block scratch_;
  size_t slot_bytes_ = 0;          // scratch per message in flight
  size_t next_ = 0;                // the message to post next
  size_t done_ = 0;                // the oldest message not finished
  size_t window_ = kWindow;        // messages in flight at most (set by the constructor)
  std::vector<MPI_Request> reqs_;  // recv, send per slot
};

}  // namespace pycomm::mpi
