// The MPI transport: one progress thread per communicator (queue/op_queue), nonblocking MPI
// calls polled with MPI_Test so the thread stays responsive and a stall is reported on the waiter.
// It owns a duplicate of the communicator it was made from, so its traffic never mixes with the
// application's, and two more: one for op matching before every collective (signature_exchange.h),
// one for its own host all-reduce, broadcast, all-gather and reduce-scatter (allreduce_op.h,
// p2p_collective_op.h). Stall errors name the ranks behind (progress_window.h).
#pragma once

#include <mpi.h>

#include <memory>

#include "host/host_transport.h"
#include "transport/mpi/mpi_env.h"
#include "transport/mpi/mpi_op.h"

namespace pycomm::mpi {

class MpiTransport : public HostTransport, public Shutdownable {
 public:
  // Takes ownership of `comm` (already a pycomm-private duplicate or split). Collective over it.
  explicit MpiTransport(MPI_Comm comm);
  ~MpiTransport() override;
  // A transport over a duplicate of `comm` (MPI_COMM_WORLD, or one from mpi4py). Collective.
  static std::unique_ptr<MpiTransport> duplicate_of(MPI_Comm comm);

  std::string backend() const override { return "mpi"; }
  std::unique_ptr<Transport> split(int color, int key) override;  // color < 0: no group, nullptr
  std::unique_ptr<Transport> split_shared(int key) override;
  std::unique_ptr<Transport> dup() override;  // MPI_Comm_dup: same ranks, own queue and matching
  int max_tag() const override { return handles_->tag_ub; }
  std::optional<bool> oversubscribed() const override { return handles_->oversubscribed; }
  std::optional<std::vector<int64_t>> gather_at_creation(const std::vector<int64_t>& mine) override;
  void shutdown() override;
  bool left_in_flight() const override { return abandoned_; }

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
  std::unique_ptr<QueuedOp> make_match(OpInfo info) override;

 private:
  std::unique_ptr<QueuedOp> make_op(OpInfo info, Buffer in, Buffer out, MpiOp::Post post, double avg_scale,
                                    uintptr_t stream);
  // For GPU buffers: pinned host copies when this MPI cannot read device memory, else the buffers
  // themselves behind a wait for the caller's stream; nullptr for host buffers.
  static std::unique_ptr<GpuStaging> staging_for(const Buffer& in, const Buffer& out, uintptr_t stream);
  std::unique_ptr<Transport> split_with(const char* name, std::function<void(MPI_Comm*)> make);

  std::shared_ptr<CommHandles> handles_;
  bool shut_down_ = false;
  bool abandoned_ = false;
};

}  // namespace pycomm::mpi
