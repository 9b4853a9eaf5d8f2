#include "runtime/host_transport.h"

#include "runtime/caller_waits.h"
#include "runtime/inline_run.h"
#include "runtime/op_validation.h"
#include "runtime/stall.h"

namespace pycomm {

void HostTransport::init(int rank, int size, int local_rank, int local_size) {
  rank_ = rank;
  size_ = size;
  local_rank_ = local_rank;
  local_size_ = local_size;
  inline_max_bytes();  // PYCOMM_INLINE_BYTES is fixed from the first communicator on, before any op
  std::string label = backend() + " communicator (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")";
  queue_ = std::make_unique<OpQueue>(std::make_shared<CommHealth>(label));
}

std::shared_ptr<Work> HostTransport::enqueue(std::unique_ptr<QueuedOp> op) {
  if (CallerWaitsScope::active()) return queue_->submit_waited(std::move(op));
  return queue_->submit(std::move(op));
}

bool HostTransport::stop_queue() { return queue_->stop(stall_timeout_s()); }

std::shared_ptr<Work> HostTransport::allreduce(Buffer buf, ReduceOp op, uintptr_t stream, int bucket) {
  OpInfo info = allreduce_info(buf, op, size_, bucket);
  return enqueue(make_allreduce(std::move(info), buf, op, stream));
}

std::shared_ptr<Work> HostTransport::broadcast(Buffer buf, int root, uintptr_t stream) {
  OpInfo info = broadcast_info(buf, root, size_);
  return enqueue(make_broadcast(std::move(info), buf, root, stream));
}

std::shared_ptr<Work> HostTransport::allgather(Buffer out, Buffer in, uintptr_t stream) {
  OpInfo info = allgather_info(out, in, size_);
  return enqueue(make_allgather(std::move(info), out, in, stream));
}

std::shared_ptr<Work> HostTransport::reduce_scatter(Buffer out, Buffer in, ReduceOp op, uintptr_t stream) {
  OpInfo info = reduce_scatter_info(out, in, op, size_);
  return enqueue(make_reduce_scatter(std::move(info), out, in, op, stream));
}

std::shared_ptr<Work> HostTransport::alltoall(Buffer out, Buffer in, uintptr_t stream) {
  OpInfo info = alltoall_info(out, in, size_);
  return enqueue(make_alltoall(std::move(info), out, in, stream));
}

std::shared_ptr<Work> HostTransport::send(Buffer buf, int dst, int tag, uintptr_t stream) {
  OpInfo info = p2p_info("send", buf, dst, tag, size_);
  return enqueue(make_send(std::move(info), buf, dst, tag, stream));
}

std::shared_ptr<Work> HostTransport::recv(Buffer buf, int src, int tag, uintptr_t stream) {
  OpInfo info = p2p_info("recv", buf, src, tag, size_);
  return enqueue(make_recv(std::move(info), buf, src, tag, stream));
}

std::shared_ptr<Work> HostTransport::barrier() { return enqueue(make_barrier(barrier_info())); }

std::shared_ptr<Work> HostTransport::match(const std::string& name, Buffer buf, ReduceOp op) {
  OpInfo info = match_info(name, buf, op);
  auto matching = make_match(std::move(info));
  return matching ? enqueue(std::move(matching)) : nullptr;
}

}  // namespace pycomm
