// The one C++ interface every transport (MPI, NCCL/RCCL) implements. Buffers arrive raw from
// Python (pycomm/_tensors.py); a transport never sees a torch tensor.
#pragma once

#include <climits>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/p2p_message.h"

namespace pycomm {

enum class ReduceOp : int32_t { SUM = 0, AVG = 1, MAX = 2, MIN = 3 };
const char* reduce_op_name(ReduceOp op);

struct Buffer {
  void* ptr = nullptr;
  int64_t count = 0;  // elements
  DType dtype = DType::F32;
  int device = -1;  // -1: host memory; >= 0: GPU ordinal
  int64_t bytes() const { return count * static_cast<int64_t>(dtype_size(dtype)); }
};

// What one submitted operation is: named in stall errors, PYCOMM_DEBUG mismatches, NVTX and stats.
struct OpInfo {
  std::string name;               // "allreduce", "broadcast", ...
  uint64_t seq = 0;               // per-communicator submission number
  int64_t collective_index = -1;  // collectives this communicator submitted before this one (the same on
                                  // every rank, unlike seq, which counts send/recv too); -1: unknown
  int64_t count = 0;
  DType dtype = DType::F32;
  int peer = -1;               // root, dst or src where the op has one
  int64_t bytes = 0;           // the op's data size as nccl-tests counts it (allgather: output, reduce_scatter: input)
  int redop = -1;              // a ReduceOp for reductions, else -1
  int tag = -1;                // send/recv tag, else -1
  int bucket = -1;             // fusion bucket id given by the caller (NVTX, errors), else -1
  double bus_factor = 1.0;     // busbw = bytes * bus_factor / seconds (nccl-tests: 2(n-1)/n for allreduce)
  bool collective = true;      // false for send/recv: PYCOMM_DEBUG only matches collectives
  const char* algorithm = "";  // the schedule the engine chose ("ring", "rabenseifner", "nccl"; traces, NVTX)
  std::string describe() const;  // "allreduce #12 (count 1024, float32, 4096 bytes, op SUM)"
};

// Completion of one op. wait() on a GPU op makes `stream` wait (no host sync); on a host op it
// blocks. Both raise StallError (common/errors.h) once timeout_s passes without completion
// (timeout_s <= 0: wait forever), and rethrow the op's own failure. A stall marks the transport
// broken: its later ops raise PycommError.
class Work {
 public:
  virtual ~Work() = default;
  virtual bool is_completed() = 0;
  virtual void wait(uintptr_t stream, double timeout_s) = 0;
  virtual void synchronize(double timeout_s) = 0;
  virtual const OpInfo& info() const = 0;
  // A completed receive: its message's source, tag, dtype and shape (and, for recv_new, the
  // payload). nullptr for other ops and before completion.
  virtual std::shared_ptr<const P2pMessage> received() { return nullptr; }
};

// Ops run in submission order on the transport's one queue, so ranks submitting the same sequence
// never deadlock. `stream` is the caller's current GPU stream (0 for host buffers). `caller_waits`:
// the submitting thread waits for the op at once (async_op=False), so a host transport may run it
// to completion on that thread (queue/op_queue.h, OpQueue::submit); the NCCL transport ignores it.
// Every method that creates a transport (split, split_shared) is collective over this one.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // This rank's place among the ranks of this transport that share its node.
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual std::string backend() const = 0;
  // bucket: a fusion bucket id shown in NVTX ranges and errors (-1: none).
  virtual std::shared_ptr<Work> allreduce(Buffer buf, ReduceOp op, uintptr_t stream, int bucket, bool caller_waits) = 0;
  virtual std::shared_ptr<Work> broadcast(Buffer buf, int root, uintptr_t stream, bool caller_waits) = 0;
  virtual std::shared_ptr<Work> allgather(Buffer out, Buffer in, uintptr_t stream, bool caller_waits) = 0;
  virtual std::shared_ptr<Work> reduce_scatter(Buffer out, Buffer in, ReduceOp op, uintptr_t stream,
                                               bool caller_waits) = 0;
  virtual std::shared_ptr<Work> alltoall(Buffer out, Buffer in, uintptr_t stream, bool caller_waits) = 0;
  virtual std::shared_ptr<Work> send(Buffer buf, int dst, int tag, uintptr_t stream, bool caller_waits) = 0;
  virtual std::shared_ptr<Work> recv(Buffer buf, int src, int tag, uintptr_t stream, bool caller_waits) = 0;
  virtual std::shared_ptr<Work> barrier(bool caller_waits) = 0;

  // ---- point to point beyond send/recv (pycomm/p2p.py). A transport without them throws
  // PycommError naming itself (unsupported()); NCCL has none: it has no any-source receive and no
  // message it could probe.
  // The largest tag a send/recv may use (MPI: the MPI_TAG_UB attribute).
  virtual int max_tag() const { return INT_MAX; }
  // Whether recv/recv_new/probe accept src = kAnySource.
  virtual bool any_source() const { return false; }
  // Whether ranks outnumber cores on some node of this transport (agreed by every rank: choices all
  // ranks must make alike key on it, such as the broadcast's schedule); nullopt where nothing does.
  virtual std::optional<bool> oversubscribed() const { return std::nullopt; }
  // Every rank's `mine` (the same length on every rank), rank by rank: how the settings every rank must
  // share are compared when a communicator is made (pycomm/rank_agreement.py), before any op is
  // submitted on it. Outside the op queue, the op check and the stats. Collective. nullopt where the
  // transport has no channel for it (NCCL); one rank has nothing to gather.
  virtual std::optional<std::vector<int64_t>> gather_at_creation(const std::vector<int64_t>& mine) {
    return size() == 1 ? std::optional<std::vector<int64_t>>(mine) : std::nullopt;
  }
  // A send whose header carries `shape` (at most kMaxP2pDims entries; their product is buf.count).
  virtual std::shared_ptr<Work> send_shaped(Buffer buf, const std::vector<int64_t>& shape, int dst, int tag,
                                            uintptr_t stream, bool caller_waits) {
    unsupported("send_tensor");
  }
  // A receive of unknown size and dtype: the Work's received() owns the payload in host memory.
  virtual std::shared_ptr<Work> recv_new(int src, int tag, bool caller_waits) { unsupported("recv_tensor"); }
  // The next message a recv with (src, tag) would get (tag may be kAnyTag), without receiving it;
  // nullopt when none has arrived. block: wait for one (up to the stall timeout, then StallError).
  virtual std::optional<P2pMessage> probe(int src, int tag, bool block) { unsupported("probe"); }
  // A new transport over the same ranks with its own queue and message matching. Collective.
  virtual std::unique_ptr<Transport> dup() { return split(0, rank()); }
  // Op matching alone, under the name of a compound op built from other ops ("allreduce_quantized",
  // "allreduce_coalesced"; buf describes its tensor, it is not touched): ranks that called different
  // ops at this point get MismatchError naming what they called. nullptr where the transport
  // matches nothing (one rank; NCCL without PYCOMM_DEBUG).
  virtual std::shared_ptr<Work> match(const std::string& name, Buffer buf, ReduceOp op) { return nullptr; }
  // True when an op submitted with caller_waits may run to completion on the submitting thread
  // (host transports); the bindings then release the GIL around the submission.
  virtual bool may_run_on_caller() const { return false; }
  // This communicator's id in trace events (diagnostics/trace.h); 0 where its ops are not traced.
  virtual uint32_t trace_comm_id() const { return 0; }
  virtual std::unique_ptr<Transport> split(int color, int key) = 0;
  // The ranks on this rank's node (MPI_Comm_split_type SHARED), ordered by key.
  virtual std::unique_ptr<Transport> split_shared(int key) = 0;
  // Completes what was submitted (bounded by the stall timeout) and releases the transport's
  // resources; later ops raise PycommError. Idempotent; pycomm.finalize() calls it.
  virtual void shutdown() = 0;
  // Stops this communicator at once because its rank failed and is about to exit (pycomm.abort):
  // NCCL aborts its communicator, so no kernel of it keeps running and peers' ops fail instead of
  // waiting. Host transports have nothing to stop: MPI_Abort (pycomm.abort) ends their job.
  virtual void abort(const std::string& reason) { (void)reason; }

 protected:
  [[noreturn]] void unsupported(const char* what) const;  // PycommError: "<what>: backend 'x' has no ..."
};

}  // namespace pycomm
