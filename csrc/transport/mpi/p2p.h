// Point-to-point messages with a header: every send is a 64-byte header message (count, dtype,
// the send's sequence number; room for a shape) followed by its payload, on the same tag. A recv
// first takes the header (MPI_Improbe + MPI_Mrecv, so it never posts a buffer smaller than what
// arrives), checks it against its own buffer, and only then posts the payload receive; a different
// size or dtype drains the payload into scratch (the sender completes) and raises MismatchError
// naming both ops. Headers also let a later recv_tensor learn an unknown shape before receiving.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "queue/queued_op.h"
#include "transport/mpi/comm_handles.h"
#include "transport/mpi/gpu_staging.h"
#include "transport/mpi/mpi_op.h"

namespace pycomm::mpi {

struct P2pHeader {
  uint32_t magic = 0;
  uint16_t version = 0;
  uint16_t ndim = 0;   // 0: a flat buffer (shape unused); send_tensor will fill shape[0..ndim)
  int32_t dtype = 0;   // a DType code
  int32_t tag = 0;
  int64_t count = 0;   // elements
  int64_t seq = 0;     // the send's sequence number on its communicator (named in errors)
  int64_t shape[4] = {};
};
static_assert(sizeof(P2pHeader) == 64, "the header is 64 bytes on the wire");

// A send: the header, then the payload, as nonblocking sends on h->comm.
class P2pSendOp : public MpiOp {
 public:
  P2pSendOp(OpInfo info, std::shared_ptr<CommHandles> comm, Buffer buf, std::unique_ptr<GpuStaging> staging);
  void start() override;  // fills in the header's sequence number, then posts

 private:
  std::shared_ptr<P2pHeader> header_;
};

class P2pRecvOp : public QueuedOp {
 public:
  P2pRecvOp(OpInfo info, std::shared_ptr<CommHandles> comm, Buffer buf, std::unique_ptr<GpuStaging> staging);
  ~P2pRecvOp() override;
  bool can_run_inline() const override { return buf_.device < 0; }
  void start() override;
  bool test() override;

 private:
  bool take_header();   // true once the header is in and the payload receives are posted
  void post_payload(char* dst, int64_t bytes);
  std::string mismatch(const P2pHeader& h) const;  // "" when the header matches this recv

  std::shared_ptr<CommHandles> comm_;
  Buffer buf_, target_;  // target_: buf_, or its pinned host copy when staged
  std::unique_ptr<GpuStaging> staging_;
  std::unique_ptr<P2pHeader> header_ = std::make_unique<P2pHeader>();
  std::unique_ptr<std::vector<char>> drain_;  // the sender's payload when it does not fit this recv
  std::string mismatch_;
  std::vector<MPI_Request> reqs_;
  bool have_header_ = false;
  bool in_order_ = false;  // registered in comm_->recv_order
};

}  // namespace pycomm::mpi
