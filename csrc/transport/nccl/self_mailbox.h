// Send/recv of a rank to itself on the NCCL transport. NCCL pairs a send with its recv only inside
// one group, but pycomm posts them as separate ops; so a send to self is staged (copied, on the
// comm stream, into a stream-ordered allocation) and a later recv from self with the same tag
// copies it out, as MPI's eager protocol does. A recv from self needs its send posted first.
#pragma once

#include <deque>
#include <map>

#include "common/gpu_compat.h"
#include "common/transport.h"

namespace pycomm::nccl {

class SelfMailbox {
 public:
  ~SelfMailbox() { clear(); }
  // Frees unclaimed messages (only once the comm stream's work is done).
  void clear();
  // Drops unclaimed messages without freeing them (their copies may still be running).
  void forget() { by_tag_.clear(); }
  // Both enqueue on `stream` (the comm stream); callers serialise them.
  void send(const Buffer& buf, int tag, gpuStream_t stream);
  // Throws PycommError when no send to self with `tag` is waiting or its size differs.
  void recv(const Buffer& buf, int tag, gpuStream_t stream, int rank);

 private:
  struct Message {
    void* data;
    int64_t bytes;
  };
  std::map<int, std::deque<Message>> by_tag_;
};

}  // namespace pycomm::nccl
