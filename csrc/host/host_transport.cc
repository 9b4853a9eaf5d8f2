#include "host/host_transport.h"

#include <chrono>
#include <stdexcept>

#include "diagnostics/op_validation.h"
#include "diagnostics/stall.h"
#include "queue/inline_run.h"
#include "queue/spin.h"

namespace pycomm {

void HostTransport::init(int rank, int size, int local_rank, int local_size) {
  rank_ = rank;
  size_ = size;
  local_rank_ = local_rank;
  local_size_ = local_size;
  inline_max_bytes();  // PYCOMM_INLINE_BYTES is fixed from the first communicator on, before any op
  std::string label = backend() + " communicator (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")";
  queue_ = std::make_unique<OpQueue>(std::make_shared<CommHealth>(label, rank, size));
}

std::shared_ptr<Work> HostTransport::submit(std::unique_ptr<QueuedOp> op, bool caller_waits) {
  std::shared_ptr<P2pMessage> received = op->received;
  std::shared_ptr<HostWork> work = queue_->submit(std::move(op), caller_waits);
  work->set_received(std::move(received));  // before the caller has the Work: it reads it after wait()
  return work;
}

bool HostTransport::stop_queue() { return queue_->stop(stall_timeout_s()); }

std::shared_ptr<Work> HostTransport::allreduce(Buffer buf, ReduceOp op, uintptr_t stream, int bucket,
                                               bool caller_waits) {
  OpInfo info = allreduce_info(buf, op, size_, bucket);
  return submit(make_allreduce(std::move(info), buf, op, stream), caller_waits);
}

std::shared_ptr<Work> HostTransport::broadcast(Buffer buf, int root, uintptr_t stream, bool caller_waits) {
  OpInfo info = broadcast_info(buf, root, size_);
  return submit(make_broadcast(std::move(info), buf, root, stream), caller_waits);
}

std::shared_ptr<Work> HostTransport::allgather(Buffer out, Buffer in, uintptr_t stream, bool caller_waits) {
  OpInfo info = allgather_info(out, in, size_);
  return submit(make_allgather(std::move(info), out, in, stream), caller_waits);
}

std::shared_ptr<Work> HostTransport::reduce_scatter(Buffer out, Buffer in, ReduceOp op, uintptr_t stream,
                                                    bool caller_waits) {
  OpInfo info = reduce_scatter_info(out, in, op, size_);
  return submit(make_reduce_scatter(std::move(info), out, in, op, stream), caller_waits);
}

std::shared_ptr<Work> HostTransport::alltoall(Buffer out, Buffer in, uintptr_t stream, bool caller_waits) {
  OpInfo info = alltoall_info(out, in, size_);
  return submit(make_alltoall(std::move(info), out, in, stream), caller_waits);
}

std::shared_ptr<Work> HostTransport::send(Buffer buf, int dst, int tag, uintptr_t stream, bool caller_waits) {
  OpInfo info = p2p_info("send", buf, dst, tag, size_, max_tag());
  return submit(make_send(std::move(info), buf, dst, tag, std::nullopt, stream), caller_waits);
}

std::shared_ptr<Work> HostTransport::send_shaped(Buffer buf, const std::vector<int64_t>& shape, int dst, int tag,
                                                 uintptr_t stream, bool caller_waits) {
  OpInfo info = p2p_info("send", buf, dst, tag, size_, max_tag());
  if (shape.size() > static_cast<size_t>(kMaxP2pDims))
    throw std::invalid_argument("send_tensor: tensor has " + std::to_string(shape.size()) + " dimensions; at most " +
                                std::to_string(kMaxP2pDims) + " fit in the message header (reshape it first)");
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw std::invalid_argument("send_tensor: negative dimension " + std::to_string(d));
    n *= d;
  }
  if (n != buf.count)
    throw std::invalid_argument("send_tensor: the shape has " + std::to_string(n) + " elements but the buffer " +
                                std::to_string(buf.count));
  return submit(make_send(std::move(info), buf, dst, tag, shape, stream), caller_waits);
}

std::shared_ptr<Work> HostTransport::recv(Buffer buf, int src, int tag, uintptr_t stream, bool caller_waits) {
  OpInfo info = p2p_info("recv", buf, src, tag, size_, max_tag());
  return submit(make_recv(std::move(info), buf, src, tag, stream), caller_waits);
}

std::shared_ptr<Work> HostTransport::recv_new(int src, int tag, bool caller_waits) {
  OpInfo info = p2p_info("recv", Buffer{nullptr, 0, DType::U8, -1}, src, tag, size_, max_tag());
  info.name = "recv_tensor";
  return submit(make_recv_new(std::move(info), src, tag), caller_waits);
}

std::optional<P2pMessage> HostTransport::probe(int src, int tag, bool block) {
  OpInfo info = p2p_info("recv", Buffer{nullptr, 0, DType::U8, -1}, src, tag == kAnyTag ? 0 : tag, size_, max_tag());
  info.name = "probe";
  info.tag = tag;
  health()->check_usable("probe");
  const double timeout_s = stall_timeout_s();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  Backoff backoff;
  while (true) {
    if (auto m = try_probe(src, tag); m || !block) return m;
    if (timeout_s > 0 && std::chrono::steady_clock::now() > deadline) raise_stall(info, timeout_s, *health());
    health()->check_usable("probe");
    backoff.idle();
  }
}

std::shared_ptr<Work> HostTransport::barrier(bool caller_waits) {
  return submit(make_barrier(barrier_info()), caller_waits);
}

std::shared_ptr<Work> HostTransport::match(const std::string& name, Buffer buf, ReduceOp op) {
  OpInfo info = match_info(name, buf, op);
  auto matching = make_match(std::move(info));
  return matching ? submit(std::move(matching), false) : nullptr;
}

}  // namespace pycomm
