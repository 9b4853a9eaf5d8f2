// The NCCL / RCCL transport. Ops are enqueued from the calling thread, in submission order, on one
// communication stream per communicator (that stream is the communicator's queue): each op first
// makes the comm stream wait on an event of the caller's stream (so it sees the caller's data),
// runs the NCCL call, and records a completion event that Work::wait() hands back to the caller's
// stream. A watchdog thread (nccl_watchdog.h) times ops and enforces the stall deadline.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/transport.h"
#include "transport/nccl/nccl_comm.h"
#include "transport/nccl/nccl_watchdog.h"
#include "transport/nccl/self_mailbox.h"

namespace pycomm::nccl {

class NcclTransport : public Transport {
 public:
  // Joins the communicator of `size` ranks named by `id` (ncclCommInitRank) on GPU `device`.
  // Collective: every rank calls it with the same id.
  static std::unique_ptr<NcclTransport> create(const ncclUniqueId& id, int rank, int size, int device);
  // Takes ownership of `comm` (on `device`). Collective: exchanges host names for local_rank.
  NcclTransport(ncclComm_t comm, int device);
  ~NcclTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  uint32_t trace_comm_id() const override { return comm_->health().trace_comm().id; }
  std::string backend() const override { return "nccl"; }
  int device() const { return device_; }
  uintptr_t stream() const { return reinterpret_cast<uintptr_t>(stream_); }

  // `caller_waits` changes nothing here: every op is enqueued on the comm stream from the caller's thread.
  std::shared_ptr<Work> allreduce(Buffer buf, ReduceOp op, uintptr_t stream, int bucket, bool caller_waits) override;
  std::shared_ptr<Work> broadcast(Buffer buf, int root, uintptr_t stream, bool caller_waits) override;
  std::shared_ptr<Work> allgather(Buffer out, Buffer in, uintptr_t stream, bool caller_waits) override;
  std::shared_ptr<Work> reduce_scatter(Buffer out, Buffer in, ReduceOp op, uintptr_t stream,
                                       bool caller_waits) override;
  std::shared_ptr<Work> alltoall(Buffer out, Buffer in, uintptr_t stream, bool caller_waits) override;
  std::shared_ptr<Work> send(Buffer buf, int dst, int tag, uintptr_t stream, bool caller_waits) override;
  std::shared_ptr<Work> recv(Buffer buf, int src, int tag, uintptr_t stream, bool caller_waits) override;
  // A one-element all-reduce; its Work's wait() blocks the host.
  std::shared_ptr<Work> barrier(bool caller_waits) override;
  // ncclCommSplit (NCCL >= 2.18), else a new communicator from a fresh unique id; color < 0: nullptr.
  std::unique_ptr<Transport> split(int color, int key) override;
  std::unique_ptr<Transport> split_shared(int key) override;
  void shutdown() override;
  void abort(const std::string& reason) override { comm_->abort(reason); }

 private:
  // Enqueues `body(comm, comm_stream)` as the op `info`. Caller-stream ordering applies when
  // `caller` is set (every op but barrier). Skips the NCCL call for ops that move no bytes.
  using Body = std::function<ncclResult_t(ncclComm_t, gpuStream_t)>;
  std::shared_ptr<Work> launch(OpInfo info, const uintptr_t* caller, bool host_blocking, const Body& body);
  // Each rank's `n` bytes, rank by rank: an NCCL all-gather through device memory, awaited on the
  // host with the stall deadline. For setup, split and PYCOMM_DEBUG, not for user data.
  std::vector<char> host_allgather(const void* mine, size_t n, const OpInfo& info);
  void place_on_nodes();                 // local_rank_, local_size_, node_color_
  void debug_check(const OpInfo& info);  // PYCOMM_DEBUG=1 op matching
  std::unique_ptr<Transport> split_as(const char* name, int color, int key);
  void check_device(const Buffer& b, const char* what) const;

  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, node_color_ = 0;
  int device_;
  gpuStream_t stream_ = nullptr;
  std::shared_ptr<NcclComm> comm_;
  std::unique_ptr<NcclWatchdog> watchdog_;
  std::mutex submit_mu_;  // sequence numbers, submission order, the mailbox
  uint64_t next_seq_ = 0;
  SelfMailbox self_;
  void* barrier_buf_ = nullptr;  // one int32 on device_
  bool shut_down_ = false;
};

}  // namespace pycomm::nccl
