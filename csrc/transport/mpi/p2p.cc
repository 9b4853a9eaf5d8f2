#include "transport/mpi/p2p.h"

#include <algorithm>

#include "common/errors.h"
#include "transport/mpi/mpi_env.h"

namespace pycomm::mpi {
namespace {

constexpr uint32_t kMagic = 0x4d4f4350;  // "PCOM"
constexpr uint16_t kVersion = 1;
constexpr int kHeaderBytes = static_cast<int>(sizeof(P2pHeader));
constexpr int64_t kMaxPiece = int64_t{1} << 30;  // MPI counts are ints: payloads go as pieces of <= 1 GiB

template <typename Fn>
void for_each_piece(char* p, int64_t bytes, Fn fn) {
  for (int64_t off = 0; off < bytes; off += kMaxPiece) fn(p + off, static_cast<int>(std::min(kMaxPiece, bytes - off)));
}

OpInfo sender_info(const P2pHeader& h, int my_rank) {
  OpInfo s;
  s.name = "send";
  s.seq = static_cast<uint64_t>(h.seq);
  s.count = h.count;
  s.dtype = h.dtype >= 0 && h.dtype <= static_cast<int32_t>(DType::I64) ? static_cast<DType>(h.dtype) : DType::U8;
  s.bytes = h.count * static_cast<int64_t>(dtype_size(s.dtype));
  s.peer = my_rank;
  s.tag = h.tag;
  return s;
}

}  // namespace

P2pSendOp::P2pSendOp(OpInfo info, std::shared_ptr<CommHandles> comm, Buffer buf, std::unique_ptr<GpuStaging> staging)
    : MpiOp(info, comm, buf, Buffer{nullptr, 0, buf.dtype, buf.device}, {}, 0.0, std::move(staging)),
      header_(std::make_shared<P2pHeader>()) {
  header_->magic = kMagic;
  header_->version = kVersion;
  header_->dtype = static_cast<int32_t>(buf.dtype);
  header_->tag = info.tag;
  header_->count = buf.count;
  const int dst = info.peer, tag = info.tag;
  std::shared_ptr<P2pHeader> header = header_;
  set_post([comm, dst, tag, header](const Buffer& in, const Buffer&, bool, std::vector<MPI_Request>& reqs) {
    // In order on one tag: MPI never lets the payload overtake its header.
    reqs.emplace_back();
    check(MPI_Isend(header.get(), kHeaderBytes, MPI_BYTE, dst, tag, comm->comm, &reqs.back()), "send (header)");
    for_each_piece(static_cast<char*>(in.ptr), in.bytes(), [&](char* p, int n) {
      reqs.emplace_back();
      check(MPI_Isend(p, n, MPI_BYTE, dst, tag, comm->comm, &reqs.back()), "send");
    });
  });
}

void P2pSendOp::start() {
  header_->seq = static_cast<int64_t>(info.seq);
  MpiOp::start();
}

P2pRecvOp::P2pRecvOp(OpInfo info, std::shared_ptr<CommHandles> comm, Buffer buf, std::unique_ptr<GpuStaging> staging)
    : QueuedOp(std::move(info)), comm_(std::move(comm)), buf_(buf), target_(buf), staging_(std::move(staging)) {}

P2pRecvOp::~P2pRecvOp() {
  if (in_order_) comm_->recv_order.remove(info.peer, info.tag, info.seq);
  bool pending = false;
  for (MPI_Request r : reqs_) pending = pending || r != MPI_REQUEST_NULL;
  if (pending) {  // abandoned on a broken communicator: MPI may still write into these
    if (staging_) staging_->leak();
    (void)drain_.release();
  }
}

void P2pRecvOp::start() {
  if (staging_) {
    staging_->to_host();
    target_ = staging_->host_out();
  }
  comm_->recv_order.enqueue(info.peer, info.tag, info.seq);
  in_order_ = true;
}

std::string P2pRecvOp::mismatch(const P2pHeader& h) const {
  if (h.count == buf_.count && h.dtype == static_cast<int32_t>(buf_.dtype)) return "";
  OpInfo sent = sender_info(h, comm_->rank);
  const char* what = sent.bytes != buf_.bytes() ? "sizes differ" : "dtypes or element counts differ";
  return info.describe() + " on the " + comm_->label + " matched rank " + std::to_string(info.peer) + "'s " +
         sent.describe() + " (" + what + ": the sender's " + std::to_string(sent.count) + " x " +
         dtype_name(sent.dtype) + " vs this recv's " + std::to_string(buf_.count) + " x " + dtype_name(buf_.dtype) +
         "). The payload was discarded; the communicator is now broken.";
}

void P2pRecvOp::post_payload(char* dst, int64_t bytes) {
  for_each_piece(dst, bytes, [&](char* p, int n) {
    reqs_.emplace_back();
    check(MPI_Irecv(p, n, MPI_BYTE, info.peer, info.tag, comm_->comm, &reqs_.back()), "recv");
  });
}

bool P2pRecvOp::take_header() {
  // Only the oldest pending recv of this (source, tag) may take the next message: MPI's order.
  if (!comm_->recv_order.is_next(info.peer, info.tag, info.seq)) return false;
  int found = 0;
  MPI_Message msg;
  MPI_Status status;
  check(MPI_Improbe(info.peer, info.tag, comm_->comm, &found, &msg, &status), "recv (MPI_Improbe)");
  if (!found) return false;
  int bytes = 0;
  MPI_Get_count(&status, MPI_BYTE, &bytes);
  if (bytes != kHeaderBytes) {
    std::vector<char> junk(static_cast<size_t>(std::max(bytes, 0)));
    MPI_Mrecv(junk.data(), bytes, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
    throw PycommError(info.describe() + " on the " + comm_->label + " got a " + std::to_string(bytes) +
                      "-byte message without pycomm's header from rank " + std::to_string(info.peer) +
                      " (only pycomm's send/isend may send on a pycomm communicator)");
  }
  check(MPI_Mrecv(header_.get(), kHeaderBytes, MPI_BYTE, &msg, MPI_STATUS_IGNORE), "recv (header)");
  if (header_->magic != kMagic || header_->version != kVersion)
    throw PycommError(info.describe() + " on the " + comm_->label + ": rank " + std::to_string(info.peer) +
                      " sent a header of another pycomm version or not from pycomm");
  mismatch_ = mismatch(*header_);
  if (mismatch_.empty()) {
    post_payload(static_cast<char*>(target_.ptr), target_.bytes());
  } else {  // take the sender's payload all the same, so that its send completes
    drain_ = std::make_unique<std::vector<char>>(static_cast<size_t>(sender_info(*header_, comm_->rank).bytes));
    post_payload(drain_->data(), static_cast<int64_t>(drain_->size()));
  }
  comm_->recv_order.remove(info.peer, info.tag, info.seq);  // after posting: the next recv matches after us
  in_order_ = false;
  have_header_ = true;
  return true;
}

bool P2pRecvOp::test() {
  if (!have_header_ && !take_header()) return false;
  int done = 1;
  if (!reqs_.empty())
    check(MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &done, MPI_STATUSES_IGNORE), "recv");
  if (!done) return false;
  if (!mismatch_.empty()) throw MismatchError(mismatch_);
  if (staging_) staging_->to_device();
  return true;
}

}  // namespace pycomm::mpi
