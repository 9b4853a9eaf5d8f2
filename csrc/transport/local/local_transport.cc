#include "transport/local/local_transport.h"

#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "common/errors.h"
#include "diagnostics/op_validation.h"
#include "host/device_copy.h"

namespace pycomm {

// Messages a rank sent to itself, by tag, in order (the queue thread is the only user).
struct LocalMailbox {
  std::map<int, std::deque<std::vector<char>>> by_tag;
};

namespace {

// An op that does all its work when it starts.
class ImmediateOp : public QueuedOp {
 public:
  ImmediateOp(OpInfo info, std::function<void()> run) : QueuedOp(std::move(info)), run_(std::move(run)) {}
  void start() override { run_(); }
  bool test() override { return true; }

 private:
  std::function<void()> run_;
};

class SelfSendOp : public QueuedOp {
 public:
  SelfSendOp(OpInfo info, Buffer buf, std::shared_ptr<LocalMailbox> box)
      : QueuedOp(std::move(info)), buf_(buf), box_(std::move(box)) {}
  void start() override {
    std::vector<char> msg(static_cast<size_t>(buf_.bytes()));
    copy_bytes(msg.data(), buf_.ptr, msg.size(), buf_.device, 0);
    box_->by_tag[info.tag].push_back(std::move(msg));
  }
  bool test() override { return true; }

 private:
  Buffer buf_;
  std::shared_ptr<LocalMailbox> box_;
};

class SelfRecvOp : public QueuedOp {
 public:
  SelfRecvOp(OpInfo info, Buffer buf, std::shared_ptr<LocalMailbox> box)
      : QueuedOp(std::move(info)), buf_(buf), box_(std::move(box)) {}
  void start() override {}
  bool test() override {
    auto it = box_->by_tag.find(info.tag);
    if (it == box_->by_tag.end() || it->second.empty()) return false;
    std::vector<char> msg = std::move(it->second.front());
    it->second.pop_front();
    if (static_cast<int64_t>(msg.size()) != buf_.bytes())
      throw PycommError("recv: the matching send (tag " + std::to_string(info.tag) + ") has " +
                                  std::to_string(msg.size()) + " bytes, the receive buffer " +
                                  std::to_string(buf_.bytes()));
    copy_bytes(buf_.ptr, msg.data(), msg.size(), buf_.device, 0);
    return true;
  }

 private:
  Buffer buf_;
  std::shared_ptr<LocalMailbox> box_;
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
  return std::make_unique<ImmediateOp>(std::move(info), [out, in, stream] {
    copy_bytes(out.ptr, in.ptr, static_cast<size_t>(in.bytes()), in.device, stream);
  });
}

std::unique_ptr<QueuedOp> LocalTransport::make_reduce_scatter(OpInfo info, Buffer out, Buffer in, ReduceOp,
                                                              uintptr_t stream) {
  return std::make_unique<ImmediateOp>(std::move(info), [out, in, stream] {
    copy_bytes(out.ptr, in.ptr, static_cast<size_t>(in.bytes()), in.device, stream);
  });
}

std::unique_ptr<QueuedOp> LocalTransport::make_alltoall(OpInfo info, Buffer out, Buffer in, uintptr_t stream) {
  return std::make_unique<ImmediateOp>(std::move(info), [out, in, stream] {
    copy_bytes(out.ptr, in.ptr, static_cast<size_t>(in.bytes()), in.device, stream);
  });
}

std::unique_ptr<QueuedOp> LocalTransport::make_send(OpInfo info, Buffer buf, int, int, uintptr_t) {
  return std::make_unique<SelfSendOp>(std::move(info), buf, mailbox_);
}

std::unique_ptr<QueuedOp> LocalTransport::make_recv(OpInfo info, Buffer buf, int, int, uintptr_t) {
  return std::make_unique<SelfRecvOp>(std::move(info), buf, mailbox_);
}

std::unique_ptr<QueuedOp> LocalTransport::make_barrier(OpInfo info) {
  return std::make_unique<ImmediateOp>(std::move(info), [] {});
}

}  // namespace pycomm
