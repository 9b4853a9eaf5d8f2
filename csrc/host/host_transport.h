// The common frame of transports whose ops run on a host progress thread (MPI, local): argument
// checks and OpInfo, then the op built by the subclass goes to this communicator's OpQueue with
// `caller_waits` (when the caller waits for it at once and the queue is idle, it runs on the calling thread).
#pragma once

#include <memory>
#include <string>

#include "common/transport.h"
#include "queue/op_queue.h"

namespace pycomm {

class HostTransport : public Transport {
 public:
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }

  std::shared_ptr<Work> allreduce(Buffer buf, ReduceOp op, uintptr_t stream, int bucket, bool caller_waits) override;
  std::shared_ptr<Work> broadcast(Buffer buf, int root, uintptr_t stream, bool caller_waits) override;
  std::shared_ptr<Work> allgather(Buffer out, Buffer in, uintptr_t stream, bool caller_waits) override;
  std::shared_ptr<Work> reduce_scatter(Buffer out, Buffer in, ReduceOp op, uintptr_t stream,
                                       bool caller_waits) override;
  std::shared_ptr<Work> alltoall(Buffer out, Buffer in, uintptr_t stream, bool caller_waits) override;
  std::shared_ptr<Work> send(Buffer buf, int dst, int tag, uintptr_t stream, bool caller_waits) override;
  std::shared_ptr<Work> recv(Buffer buf, int src, int tag, uintptr_t stream, bool caller_waits) override;
  std::shared_ptr<Work> barrier(bool caller_waits) override;
  bool any_source() const override { return true; }
  std::shared_ptr<Work> send_shaped(Buffer buf, const std::vector<int64_t>& shape, int dst, int tag, uintptr_t stream,
                                    bool caller_waits) override;
  std::shared_ptr<Work> recv_new(int src, int tag, bool caller_waits) override;
  // try_probe() until a message is there; block: up to the stall timeout, then StallError.
  std::optional<P2pMessage> probe(int src, int tag, bool block) override;
  std::shared_ptr<Work> match(const std::string& name, Buffer buf, ReduceOp op) override;
  bool may_run_on_caller() const override { return true; }
  uint32_t trace_comm_id() const override { return health()->trace_comm().id; }

 protected:
  // Subclasses call init() once rank, size and the local placement are known.
  void init(int rank, int size, int local_rank, int local_size);
  OpQueue& queue() { return *queue_; }
  const std::shared_ptr<CommHealth>& health() const { return queue_->health(); }
  // Stops the queue (idempotent): true when it ended cleanly, so its resources may be freed.
  bool stop_queue();

  virtual std::unique_ptr<QueuedOp> make_allreduce(OpInfo info, Buffer buf, ReduceOp op, uintptr_t stream) = 0;
  virtual std::unique_ptr<QueuedOp> make_broadcast(OpInfo info, Buffer buf, int root, uintptr_t stream) = 0;
  virtual std::unique_ptr<QueuedOp> make_allgather(OpInfo info, Buffer out, Buffer in, uintptr_t stream) = 0;
  virtual std::unique_ptr<QueuedOp> make_reduce_scatter(OpInfo info, Buffer out, Buffer in, ReduceOp op,
                                                        uintptr_t stream) = 0;
  virtual std::unique_ptr<QueuedOp> make_alltoall(OpInfo info, Buffer out, Buffer in, uintptr_t stream) = 0;
  // shape: what the header carries (nullopt for a plain send). src of a recv may be kAnySource.
  virtual std::unique_ptr<QueuedOp> make_send(OpInfo info, Buffer buf, int dst, int tag,
                                              const std::optional<std::vector<int64_t>>& shape, uintptr_t stream) = 0;
  virtual std::unique_ptr<QueuedOp> make_recv(OpInfo info, Buffer buf, int src, int tag, uintptr_t stream) = 0;
  // A receive into new host memory sized by the message's header; sets the op's `received`.
  virtual std::unique_ptr<QueuedOp> make_recv_new(OpInfo info, int src, int tag) = 0;
  // The header of the next message (src, tag) would receive, left for that receive; nullopt if none yet.
  virtual std::optional<P2pMessage> try_probe(int src, int tag) = 0;
  virtual std::unique_ptr<QueuedOp> make_barrier(OpInfo info) = 0;
  // The op of match(); nullptr (the default): this transport matches nothing.
  virtual std::unique_ptr<QueuedOp> make_match(OpInfo info) { return nullptr; }

 private:
  // OpQueue::submit, handing a receive's message (QueuedOp::received) to its Work.
  std::shared_ptr<Work> submit(std::unique_ptr<QueuedOp> op, bool caller_waits);

  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::unique_ptr<OpQueue> queue_;
};

}  // namespace pycomm
