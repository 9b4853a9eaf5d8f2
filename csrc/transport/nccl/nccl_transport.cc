#include "transport/nccl/nccl_transport.h"

#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <thread>

#include "common/errors.h"
#include "diagnostics/nvtx.h"
#include "diagnostics/op_check.h"
#include "diagnostics/op_validation.h"
#include "diagnostics/stall.h"

namespace pycomm::nccl {
namespace {

char* at(void* base, int64_t elements, DType t) {
  return static_cast<char*>(base) + elements * static_cast<int64_t>(dtype_size(t));
}

}  // namespace

void NcclTransport::check_device(const Buffer& b, const char* what) const {
  if (b.device != device_)
    throw std::invalid_argument(std::string(what) + ": the NCCL communicator runs on GPU " + std::to_string(device_) +
                                " but the tensor is " +
                                (b.device < 0 ? std::string("in host memory (use a CUDA tensor, or backend 'mpi')")
                                              : "on GPU " + std::to_string(b.device)));
}

std::shared_ptr<Work> NcclTransport::launch(OpInfo info, const uintptr_t* caller, bool host_blocking,
                                            const Body& body) {
  const double timeout_s = stall_timeout_s();
  std::lock_guard<std::mutex> lk(submit_mu_);
  comm_->throw_if_broken(info.name.c_str());
  DeviceGuard on_device(device_);
  info.seq = next_seq_++;
  info.algorithm = "nccl";
  NvtxScope range("", info);
  if (info.collective && debug_checks_enabled()) debug_check(info);
  const bool observed = observing();
  if (observed) trace_op(info, comm_->health().trace_comm(), TracePhase::kQueued, trace_now_ns());
  auto op = std::make_shared<NcclOp>(std::move(info), host_blocking);
  op->observed = observed;
  if (caller) {
    PYCOMM_GPU_CHECK(gpuEventRecord(op->ready, reinterpret_cast<gpuStream_t>(*caller)));
    PYCOMM_GPU_CHECK(gpuStreamWaitEvent(stream_, op->ready, 0));
  }
  PYCOMM_GPU_CHECK(gpuEventRecord(op->start, stream_));
  if (op->info.bytes > 0 || host_blocking)
    comm_->call(op->info.name.c_str(), [&](ncclComm_t c) { return body(c, stream_); });
  PYCOMM_GPU_CHECK(gpuEventRecord(op->done, stream_));
  comm_->health().note_started(op->info);
  watchdog_->track(op, timeout_s);
  return std::make_shared<NcclWork>(op, comm_);
}

std::shared_ptr<Work> NcclTransport::allreduce(Buffer buf, ReduceOp op, uintptr_t stream, int bucket, bool) {
  OpInfo info = allreduce_info(buf, op, size_, bucket);
  check_device(buf, "allreduce");
  ncclDataType_t dt = datatype(buf.dtype, "allreduce");
  ncclRedOp_t rop = redop(op, "allreduce");
  return launch(std::move(info), &stream, false, [=](ncclComm_t c, gpuStream_t s) {
    return ncclAllReduce(buf.ptr, buf.ptr, static_cast<size_t>(buf.count), dt, rop, c, s);
  });
}

std::shared_ptr<Work> NcclTransport::broadcast(Buffer buf, int root, uintptr_t stream, bool) {
  OpInfo info = broadcast_info(buf, root, size_);
  check_device(buf, "broadcast");
  ncclDataType_t dt = datatype(buf.dtype, "broadcast");
  return launch(std::move(info), &stream, false, [=](ncclComm_t c, gpuStream_t s) {
    return ncclBroadcast(buf.ptr, buf.ptr, static_cast<size_t>(buf.count), dt, root, c, s);
  });
}

std::shared_ptr<Work> NcclTransport::allgather(Buffer out, Buffer in, uintptr_t stream, bool) {
  OpInfo info = allgather_info(out, in, size_);
  check_device(in, "allgather");
  ncclDataType_t dt = datatype(in.dtype, "allgather");
  return launch(std::move(info), &stream, false, [=](ncclComm_t c, gpuStream_t s) {
    return ncclAllGather(in.ptr, out.ptr, static_cast<size_t>(in.count), dt, c, s);
  });
}

std::shared_ptr<Work> NcclTransport::reduce_scatter(Buffer out, Buffer in, ReduceOp op, uintptr_t stream, bool) {
  OpInfo info = reduce_scatter_info(out, in, op, size_);
  check_device(in, "reduce_scatter");
  ncclDataType_t dt = datatype(in.dtype, "reduce_scatter");
  ncclRedOp_t rop = redop(op, "reduce_scatter");
  return launch(std::move(info), &stream, false, [=](ncclComm_t c, gpuStream_t s) {
    return ncclReduceScatter(in.ptr, out.ptr, static_cast<size_t>(out.count), dt, rop, c, s);
  });
}

std::shared_ptr<Work> NcclTransport::alltoall(Buffer out, Buffer in, uintptr_t stream, bool) {
  OpInfo info = alltoall_info(out, in, size_);
  check_device(in, "alltoall");
  ncclDataType_t dt = datatype(in.dtype, "alltoall");
  const int64_t chunk = in.count / size_;
  const int n = size_;
  return launch(std::move(info), &stream, false, [=](ncclComm_t c, gpuStream_t s) {
    // One group of sends and receives, the NCCL idiom for all-to-all (a group may pair with self).
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) return r;
    for (int peer = 0; peer < n && r == ncclSuccess; ++peer) {
      r = ncclSend(at(in.ptr, peer * chunk, in.dtype), static_cast<size_t>(chunk), dt, peer, c, s);
      if (r == ncclSuccess)
        r = ncclRecv(at(out.ptr, peer * chunk, out.dtype), static_cast<size_t>(chunk), dt, peer, c, s);
    }
    ncclResult_t end = ncclGroupEnd();  // always close the group, even after a failed call
    return r != ncclSuccess ? r : end;
  });
}

// NCCL has no tags: messages between two ranks match in posting order (tags only pick the queue
// of a rank's messages to itself).
std::shared_ptr<Work> NcclTransport::send(Buffer buf, int dst, int tag, uintptr_t stream, bool) {
  OpInfo info = p2p_info("send", buf, dst, tag, size_);
  check_device(buf, "send");
  ncclDataType_t dt = datatype(buf.dtype, "send");
  if (dst == rank_) {
    return launch(std::move(info), &stream, false, [=](ncclComm_t, gpuStream_t s) {
      self_.send(buf, tag, s);
      return ncclSuccess;
    });
  }
  return launch(std::move(info), &stream, false, [=](ncclComm_t c, gpuStream_t s) {
    return ncclSend(buf.ptr, static_cast<size_t>(buf.count), dt, dst, c, s);
  });
}

std::shared_ptr<Work> NcclTransport::recv(Buffer buf, int src, int tag, uintptr_t stream, bool) {
  OpInfo info = p2p_info("recv", buf, src, tag, size_);
  check_device(buf, "recv");
  ncclDataType_t dt = datatype(buf.dtype, "recv");
  if (src == rank_) {
    const int me = rank_;
    return launch(std::move(info), &stream, false, [=](ncclComm_t, gpuStream_t s) {
      self_.recv(buf, tag, s, me);
      return ncclSuccess;
    });
  }
  return launch(std::move(info), &stream, false, [=](ncclComm_t c, gpuStream_t s) {
    return ncclRecv(buf.ptr, static_cast<size_t>(buf.count), dt, src, c, s);
  });
}

std::shared_ptr<Work> NcclTransport::barrier(bool) {
  void* one = barrier_buf_;
  return launch(barrier_info(), nullptr, true,
                [=](ncclComm_t c, gpuStream_t s) { return ncclAllReduce(one, one, 1, ncclInt32, ncclSum, c, s); });
}

void NcclTransport::shutdown() {
  std::lock_guard<std::mutex> lk(submit_mu_);
  if (shut_down_) return;
  shut_down_ = true;
  DeviceGuard on_device(device_);
  // Let submitted ops finish (bounded): a destroyed communicator must not have kernels running.
  const double timeout = stall_timeout_s();
  const auto begin = std::chrono::steady_clock::now();
  bool drained = false;
  for (;;) {
    gpuError_t r = gpuStreamQuery(stream_);
    if (r != gpuErrorNotReady) {
      drained = r == gpuSuccess;
      break;
    }
    if (comm_->health().broken() ||
        (timeout > 0 && std::chrono::steady_clock::now() - begin > std::chrono::duration<double>(timeout)))
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  watchdog_.reset();
  if (drained && !comm_->health().broken()) {
    comm_->destroy();
  } else {
    comm_->abort("shut down with ops still running");
    drained = gpuStreamQuery(stream_) == gpuSuccess;
  }
  comm_->health().mark_broken("the communicator was shut down");
  if (drained) {
    self_.clear();
    if (barrier_buf_) gpuFree(barrier_buf_);
    gpuStreamDestroy(stream_);
  } else {
    self_.forget();  // leak: kernels that never ended may still use these buffers and the stream
  }
  barrier_buf_ = nullptr;
  stream_ = nullptr;
}

NcclTransport::~NcclTransport() {
  try {
    shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pycomm: shutting down an NCCL communicator failed: %s\n", e.what());
  }
}

}  // namespace pycomm::nccl
