// Point-to-point messages with a header: every send is a 96-byte header message (count, dtype,
// the send's sequence number, and the shape for send_tensor) followed by its payload, on the same
// tag. A recv first takes the header (MPI_Improbe + MPI_Mrecv, so it never posts a buffer smaller
// than what arrives and no other thread can take the same header; see p2p_matching.h), and only
// then posts the payload receive from the header's source. A fixed-buffer recv checks the header
// against its buffer: a different size or dtype drains the payload into scratch (the sender
// completes) and raises MismatchError naming both ops. A recv_new allocates what the header
// describes. Either may receive from any source (the header's source is then the answer).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "queue/inline_run.h"
#include "queue/queued_op.h"
#include "transport/mpi/comm_handles.h"
#include "transport/mpi/gpu_staging.h"
#include "transport/mpi/mpi_op.h"

namespace pycomm::mpi {

// A send: the header, then the payload, as nonblocking sends on h->comm. shape: send_tensor's.
class P2pSendOp : public MpiOp {
 public:
  P2pSendOp(OpInfo info, std::shared_ptr<CommHandles> comm, Buffer buf,
            const std::optional<std::vector<int64_t>>& shape, std::unique_ptr<GpuStaging> staging);
  void start() override;  // fills in the header's sequence number, then posts

 private:
  std::shared_ptr<P2pHeader> header_;
};

// A receive from `info.peer` (or any source: kAnySource) on `info.tag`: into `buf`, or, when
// `allocate`, into new host memory of the header's size (buf unused).
class P2pRecvOp : public QueuedOp {
 public:
  P2pRecvOp(OpInfo info, std::shared_ptr<CommHandles> comm, Buffer buf, bool allocate,
            std::unique_ptr<GpuStaging> staging);
  ~P2pRecvOp() override;
  bool can_run_inline() const override { return buf_.device < 0 && fits_inline(info.bytes); }
  void start() override;
  bool test() override;

 private:
  bool take_header();                           // true once the header is in and the payload receives are posted
  void accept(const P2pHeader& h, int source);  // checks it, fills `received`, posts the payload
  void post_payload(char* dst, int64_t bytes);
  std::string mismatch(const P2pHeader& h) const;  // "" when the header matches this recv

  std::shared_ptr<CommHandles> comm_;
  Buffer buf_, target_;  // target_: buf_, or its pinned host copy when staged
  bool allocate_;
  int want_src_;     // info.peer as asked (kAnySource allowed)
  int source_ = -1;  // the header's source
  std::unique_ptr<GpuStaging> staging_;
  std::unique_ptr<std::vector<char>> drain_;  // the sender's payload when it does not fit this recv
  std::string mismatch_;
  std::vector<MPI_Request> reqs_;
  bool have_header_ = false;
  bool in_order_ = false;  // registered in comm_->recv_order
};

// The header the next receive of (src, tag) would take (either may be -1: any), stashed for it;
// nullopt when no message has arrived. Thread-safe.
std::optional<P2pMessage> probe_header(CommHandles& comm, int src, int tag);

}  // namespace pycomm::mpi
