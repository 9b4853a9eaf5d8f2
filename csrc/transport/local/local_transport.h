// The transport of a communicator of one rank, for single-process use without MPI or NCCL: every
// op really runs (copies, scales by 1/1, self send/recv through a mailbox) on the same queue,
// counters and diagnostics as the others, so code written for N ranks runs unchanged at 1.
#pragma once

#include <memory>

#include "runtime/host_transport.h"

namespace pycomm {

struct LocalMailbox;

class LocalTransport : public HostTransport {
 public:
  LocalTransport();
  ~LocalTransport() override;
  std::string backend() const override { return "local"; }
  std::unique_ptr<Transport> split(int color, int key) override;
  std::unique_ptr<Transport> split_shared(int key) override;
  void shutdown() override;
  std::unique_ptr<Transport> dup() override { return split(0, 0); }

 protected:
  std::unique_ptr<QueuedOp> make_allreduce(OpInfo info, Buffer buf, ReduceOp op, uintptr_t stream) override;
  std::unique_ptr<QueuedOp> make_broadcast(OpInfo info, Buffer buf, int root, uintptr_t stream) override;
  std::unique_ptr<QueuedOp> make_allgather(OpInfo info, Buffer out, Buffer in, uintptr_t stream) override;
  std::unique_ptr<QueuedOp> make_reduce_scatter(OpInfo info, Buffer out, Buffer in, ReduceOp op,
                                                uintptr_t stream) override;
  std::unique_ptr<QueuedOp> make_alltoall(OpInfo info, Buffer out, Buffer in, uintptr_t stream) override;
  std::unique_ptr<QueuedOp> make_send(OpInfo info, Buffer buf, int dst, int tag,
                                      const std::optional<std::vector<int64_t>>& shape, uintptr_t stream) override;
  std::unique_ptr<QueuedOp> make_recv(OpInfo info, Buffer buf, int src, int tag, uintptr_t stream) override;
  std::unique_ptr<QueuedOp> make_recv_new(OpInfo info, int src, int tag) override;
  std::optional<P2pMessage> try_probe(int src, int tag) override;
  std::unique_ptr<QueuedOp> make_barrier(OpInfo info) override;

 private:
  std::unique_ptr<QueuedOp> make_split();
  std::shared_ptr<LocalMailbox> mailbox_;
};

}  // namespace pycomm
