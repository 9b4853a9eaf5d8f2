#include "transport/nccl/self_mailbox.h"

#include <string>

#include "common/errors.h"

namespace pycomm::nccl {

void SelfMailbox::clear() {
  for (auto& [tag, queue] : by_tag_)
    for (Message& m : queue)
      if (m.data) gpuFree(m.data);
  by_tag_.clear();
}

void SelfMailbox::send(const Buffer& buf, int tag, gpuStream_t stream) {
  Message m{nullptr, buf.bytes()};
  if (m.bytes > 0) {
    PYCOMM_GPU_CHECK(gpuMallocAsync(&m.data, static_cast<size_t>(m.bytes), stream));
    PYCOMM_GPU_CHECK(gpuMemcpyAsync(m.data, buf.ptr, static_cast<size_t>(m.bytes), gpuMemcpyDeviceToDevice, stream));
  }
  by_tag_[tag].push_back(m);
}

void SelfMailbox::recv(const Buffer& buf, int tag, gpuStream_t stream, int rank) {
  auto it = by_tag_.find(tag);
  if (it == by_tag_.end() || it->second.empty())
    throw PycommError("recv: rank " + std::to_string(rank) + " receives from itself with tag " + std::to_string(tag) +
                      ", but no send to itself with that tag is waiting; on the NCCL backend post the send first");
  Message m = it->second.front();
  if (m.bytes != buf.bytes())
    throw PycommError("recv: the send to itself with tag " + std::to_string(tag) + " carries " +
                      std::to_string(m.bytes) + " bytes but the receive buffer has " + std::to_string(buf.bytes()));
  it->second.pop_front();
  if (m.bytes > 0) {
    PYCOMM_GPU_CHECK(gpuMemcpyAsync(buf.ptr, m.data, static_cast<size_t>(m.bytes), gpuMemcpyDeviceToDevice, stream));
    PYCOMM_GPU_CHECK(gpuFreeAsync(m.data, stream));
  }
}

}  // namespace pycomm::nccl
