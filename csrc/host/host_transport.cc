#include "host/host_transport.h"

#include "diagnostics/op_validation.h"
#include "diagnostics/stall.h"
#include "queue/inline_run.h"

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

bool HostTransport::stop_queue() { return queue_->stop(stall_timeout_s()); }

std::shared_ptr<Work> HostTransport::allreduce(Buffer buf, ReduceOp op, uintptr_t stream, int bucket,
                                               bool caller_waits) {
  OpInfo info = allreduce_info(buf, op, size_, bucket);
  return queue_->submit(make_allreduce(std::move(info), buf, op, stream), caller_waits);
}

std::shared_ptr<Work> HostTransport::broadcast(Buffer buf, int root, uintptr_t stream, bool caller_waits) {
  OpInfo info = broadcast_info(buf, root, size_);
  return queue_->submit(make_broadcast(std::move(info), buf, root, stream), caller_waits);
}

std::shared_ptr<Work> HostTransport::allgather(Buffer out, Buffer in, uintptr_t stream, bool caller_waits) {
  OpInfo info = allgather_info(out, in, size_);
  return queue_->submit(make_allgather(std::move(info), out, in, stream), caller_waits);
}

std::shared_ptr<Work> HostTransport::reduce_scatter(Buffer out, Buffer in, ReduceOp op, uintptr_t stream,
                                                    bool caller_waits) {
  OpInfo info = reduce_scatter_info(out, in, op, size_);
  return queue_->submit(make_reduce_scatter(std::move(info), out, in, op, stream), caller_waits);
}

std::shared_ptr<Work> HostTransport::alltoall(Buffer out, Buffer in, uintptr_t stream, bool caller_waits) {
  OpInfo info = alltoall_info(out, in, size_);
  return queue_->submit(make_alltoall(std::move(info), out, in, stream), caller_waits);
}

std::shared_ptr<Work> HostTransport::send(Buffer buf, int dst, int tag, uintptr_t stream, bool caller_waits) {
  OpInfo info = p2p_info("send", buf, dst, tag, size_);
  return queue_->submit(make_send(std::move(info), buf, dst, tag, stream), caller_waits);
}

std::shared_ptr<Work> HostTransport::recv(Buffer buf, int src, int tag, uintptr_t stream, bool caller_waits) {
  OpInfo info = p2p_info("recv", buf, src, tag, size_);
  return queue_->submit(make_recv(std::move(info), buf, src, tag, stream), caller_waits);
}

std::shared_ptr<Work> HostTransport::barrier(bool caller_waits) {
  return queue_->submit(make_barrier(barrier_info()), caller_waits);
}

std::shared_ptr<Work> HostTransport::match(const std::string& name, Buffer buf, ReduceOp op) {
  OpInfo info = match_info(name, buf, op);
  auto matching = make_match(std::move(info));
  return matching ? queue_->submit(std::move(matching), false) : nullptr;
}

}  // namespace pycomm
