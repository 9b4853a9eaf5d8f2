#include "transport/local/local_transport.h"

#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <vector>

#include "common/errors.h"
#include "diagnostics/op_validation.h"
#include "host/device_copy.h"

namespace pycomm {

// Messages a rank sent to itself, by tag, in order. The queue thread sends and receives; probes
// read from their callers' threads, hence the lock.
struct LocalMailbox {
  std::mutex mu;
  std::map<int, std::deque<P2pMessage>> by_tag;  // P2pMessage::data holds the payload

  std::optional<P2pMessage> front(int tag) {  // tag kAnyTag: the lowest tag with a message
    std::lock_guard<std::mutex> lk(mu);
    for (auto& [t, q] : by_tag)
      if ((tag == kAnyTag || t == tag) && !q.empty()) return q.front();
    return std::nullopt;
  }
  std::optional<P2pMessage> pop(int tag) {
    std::lock_guard<std::mutex> lk(mu);
    auto it = by_tag.find(tag);
    if (it == by_tag.end() || it->second.empty()) return std::nullopt;
    P2pMessage m = std::move(it->second.front());
    it->second.pop_front();
    return m;
  }
};

namespace {

// An op that does all its work when it starts. A blocking one runs on its caller's thread when the
// queue is idle (handing it to the queue thread cost 15 us per 4-byte all-reduce, a futex wake-up each
// way; 1.6 us run there), unless its work may block: a device copy synchronizes its stream, and only a
// Work's wait keeps the stall deadline for that.
class ImmediateOp : public QueuedOp {
 public:
  ImmediateOp(OpInfo info, std::function<void()> run, bool may_block = false)
      : QueuedOp(std::move(info)), run_(std::move(run)), may_block_(may_block) {
    this->info.algorithm = "local";  // one rank: a copy at most
  }
  bool can_run_inline() const override { return !may_block_; }
  void start() override { run_(); }
  bool test() override { return true; }

 private:
  std::function<void()> run_;
  bool may_block_;
};

// One rank's all-gather, reduce-scatter and all-to-all: its own input is the whole output.
std::unique_ptr<QueuedOp> copy_op(OpInfo info, Buffer out, Buffer in, uintptr_t stream) {
  const bool on_device = out.device >= 0 || in.device >= 0;
  return std::make_unique<ImmediateOp>(
      std::move(info),
      [out, in, stream] { copy_bytes(out.ptr, in.ptr, static_cast<size_t>(in.bytes()), in.device, stream); },
      on_device);
}

// A send to itself: the message is copied out at once. A device buffer is copied on the caller's stream
// (what it queued before the send is in the message), as the receive copies into its buffer on its own.
class SelfSendOp : public QueuedOp {
 public:
  SelfSendOp(OpInfo info, Buffer buf, const std::optional<std::vector<int64_t>>& shape,
             std::shared_ptr<LocalMailbox> box, uintptr_t stream)
      : QueuedOp(std::move(info)), buf_(buf), shape_(shape), box_(std::move(box)), stream_(stream) {}
  void start() override {
    P2pMessage m;
    m.source = 0;
    m.tag = info.tag;
    m.dtype = buf_.dtype;
    m.count = buf_.count;
    if (shape_) {
      m.ndim = static_cast<int>(shape_->size());
      m.shape = *shape_;
    }
    m.data = std::make_shared<HostBytes>(buf_.bytes());
    if (buf_.bytes() > 0) copy_bytes(m.data->data(), buf_.ptr, static_cast<size_t>(buf_.bytes()), buf_.device, stream_);
    std::lock_guard<std::mutex> lk(box_->mu);
    box_->by_tag[info.tag].push_back(std::move(m));
  }
  bool test() override { return true; }

 private:
  Buffer buf_;
  std::optional<std::vector<int64_t>> shape_;
  std::shared_ptr<LocalMailbox> box_;
  uintptr_t stream_;
};

// A receive from itself: into `buf`, or (allocate) the message's own memory handed over as is.
class SelfRecvOp : public QueuedOp {
 public:
  SelfRecvOp(OpInfo info, Buffer buf, bool allocate, std::shared_ptr<LocalMailbox> box, uintptr_t stream = 0)
      : QueuedOp(std::move(info)), buf_(buf), allocate_(allocate), box_(std::move(box)), stream_(stream) {
    received = std::make_shared<P2pMessage>();
  }
  void start() override {}
  bool test() override {
    std::optional<P2pMessage> msg = box_->pop(info.tag);
    if (!msg) return false;
    if (!allocate_) {
      if (msg->count != buf_.count || msg->dtype != buf_.dtype)
        throw MismatchError("recv: the matching send (tag " + std::to_string(info.tag) + ") has " +
                            std::to_string(msg->data->size()) + " bytes, the receive buffer " +
                            std::to_string(buf_.bytes()) + " (the send: " + std::to_string(msg->count) + " x " +
                            dtype_name(msg->dtype) + "; the receive: " + std::to_string(buf_.count) + " x " +
                            dtype_name(buf_.dtype) + ")");
      if (buf_.bytes() > 0)
        copy_bytes(buf_.ptr, msg->data->data(), static_cast<size_t>(buf_.bytes()), buf_.device, stream_);
      msg->data = nullptr;
    }
    info.count = msg->count;  // recv_new: stats count what arrived
    info.dtype = msg->dtype;
    info.bytes = msg->data ? msg->data->size() : buf_.bytes();
    *received = std::move(*msg);
    return true;
  }

 private:
  Buffer buf_;
  bool allocate_;
  std::shared_ptr<LocalMailbox> box_;
  uintptr_t stream_;
};

}  // namespace

LocalTransport::LocalTransport() : mailbox_(std::make_shared<LocalMailbox>()) { init(0, 1, 0, 1); }

LocalTransport::~LocalTransport() { shutdown(); }

void LocalTransport::shutdown() { stop_queue(); }

std::unique_ptr<Transport> LocalTransport::split(int color, int) {
  queue().run_and_wait(make_split());
  if (color < 0) return nullptr;  // as MPI_UNDEFINED: this rank joins no group
  return std::make_unique<LocalTransport>();
}

std::unique_ptr<Transport> LocalTransport::split_shared(int) {
  queue().run_and_wait(make_split());
  return std::make_unique<LocalTransport>();
}

std::unique_ptr<QueuedOp> LocalTransport::make_split() {
  return std::make_unique<ImmediateOp>(split_info("split"), [] {});
}

// The sum, max, min or average over one rank is the tensor itself: nothing to move.
std::unique_ptr<QueuedOp> LocalTransport::make_allreduce(OpInfo info, Buffer, ReduceOp, uintptr_t) {
  return std::make_unique<ImmediateOp>(std::move(info), [] {});
}

std::unique_ptr<QueuedOp> LocalTransport::make_broadcast(OpInfo info, Buffer, int, uintptr_t) {
  return std::make_unique<ImmediateOp>(std::move(info), [] {});
}

std::unique_ptr<QueuedOp> LocalTransport::make_allgather(OpInfo info, Buffer out, Buffer in, uintptr_t stream) {
  return copy_op(std::move(info), out, in, stream);
}

std::unique_ptr<QueuedOp> LocalTransport::make_reduce_scatter(OpInfo info, Buffer out, Buffer in, ReduceOp,
                                                              uintptr_t stream) {
  return copy_op(std::move(info), out, in, stream);
}

std::unique_ptr<QueuedOp> LocalTransport::make_alltoall(OpInfo info, Buffer out, Buffer in, uintptr_t stream) {
  return copy_op(std::move(info), out, in, stream);
}

std::unique_ptr<QueuedOp> LocalTransport::make_send(OpInfo info, Buffer buf, int, int,
                                                    const std::optional<std::vector<int64_t>>& shape,
                                                    uintptr_t stream) {
  return std::make_unique<SelfSendOp>(std::move(info), buf, shape, mailbox_, stream);
}

std::unique_ptr<QueuedOp> LocalTransport::make_recv(OpInfo info, Buffer buf, int, int, uintptr_t stream) {
  return std::make_unique<SelfRecvOp>(std::move(info), buf, false, mailbox_, stream);
}

std::unique_ptr<QueuedOp> LocalTransport::make_recv_new(OpInfo info, int, int) {
  return std::make_unique<SelfRecvOp>(std::move(info), Buffer{}, true, mailbox_);
}

std::optional<P2pMessage> LocalTransport::try_probe(int, int tag) {
  std::optional<P2pMessage> m = mailbox_->front(tag);
  if (m) m->data = nullptr;  // a probe reports the message, it does not hand it out
  return m;
}

std::unique_ptr<QueuedOp> LocalTransport::make_barrier(OpInfo info) {
  return std::make_unique<ImmediateOp>(std::move(info), [] {});
}

}  // namespace pycomm
