#include "transport/mpi/p2p.h"

#include <algorithm>

#include "common/errors.h"
#include "transport/mpi/mpi_env.h"

namespace pycomm::mpi {
namespace {

constexpr uint32_t kMagic = 0x4d4f4350;  // "PCOM"
constexpr uint16_t kVersion = 2;         // 2: 96-byte header with a shape of up to 8 dimensions
constexpr int kHeaderBytes = static_cast<int>(sizeof(P2pHeader));
constexpr int64_t kMaxPiece = int64_t{1} << 30;  // MPI counts are ints: payloads go as pieces of <= 1 GiB
static_assert(kMaxP2pDims == 8, "P2pHeader::shape holds kMaxP2pDims entries");

template <typename Fn>
void for_each_piece(char* p, int64_t bytes, Fn fn) {
  for (int64_t off = 0; off < bytes; off += kMaxPiece) fn(p + off, static_cast<int>(std::min(kMaxPiece, bytes - off)));
}

int mpi_source(int src) { return src < 0 ? MPI_ANY_SOURCE : src; }
int mpi_tag(int tag) { return tag < 0 ? MPI_ANY_TAG : tag; }

bool valid_dtype(int32_t code) { return code >= 0 && code <= static_cast<int32_t>(DType::I64); }

OpInfo sender_info(const P2pHeader& h, int source) {
  OpInfo s;
  s.name = "send";
  s.seq = static_cast<uint64_t>(h.seq);
  s.count = h.count;
  s.dtype = valid_dtype(h.dtype) ? static_cast<DType>(h.dtype) : DType::U8;
  s.bytes = h.count * static_cast<int64_t>(dtype_size(s.dtype));
  s.peer = source;
  s.tag = h.tag;
  return s;
}

// Takes the next header of (src, tag) from MPI (caller holds comm.p2p_mu and found nothing stashed).
// `op` names the receive in errors (nullptr: a probe); named only when one is raised, as a receive
// polls here until its message comes. nullopt when no message has arrived.
std::optional<StashedHeader> read_header(CommHandles& comm, int src, int tag, const OpInfo* op) {
  int found = 0;
  MPI_Message msg;
  MPI_Status status;
  check(MPI_Improbe(mpi_source(src), mpi_tag(tag), comm.comm, &found, &msg, &status), "recv (MPI_Improbe)");
  if (!found) return std::nullopt;
  int bytes = 0;
  MPI_Get_count(&status, MPI_BYTE, &bytes);
  // Only an error formats anything: a receive polls here until its message comes.
  auto error = [&](const std::string& before, const std::string& after) {
    const std::string what = op ? op->describe() : std::string("probe");
    return PycommError(what + " on the " + comm.label + before + " from rank " + std::to_string(status.MPI_SOURCE) +
                       " (tag " + std::to_string(status.MPI_TAG) + ")" + after);
  };
  if (bytes != kHeaderBytes) {
    std::vector<char> junk(static_cast<size_t>(std::max(bytes, 0)));
    MPI_Mrecv(junk.data(), bytes, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
    throw error(" got a " + std::to_string(bytes) + "-byte message without pycomm's header",
                " (only pycomm's send/isend/send_tensor may send on a pycomm communicator)");
  }
  StashedHeader h;
  h.source = status.MPI_SOURCE;
  h.tag = status.MPI_TAG;
  check(MPI_Mrecv(&h.header, kHeaderBytes, MPI_BYTE, &msg, MPI_STATUS_IGNORE), "recv (header)");
  const P2pHeader& p = h.header;
  if (p.magic != kMagic || p.version != kVersion)
    throw error(": a header", " of another pycomm version or not from pycomm");
  if (!valid_dtype(p.dtype) || p.count < 0 || p.ndim < -1 || p.ndim > kMaxP2pDims)
    throw error(": a malformed header", "");
  return h;
}

P2pMessage message_of(const StashedHeader& s) {
  P2pMessage m;
  m.source = s.source;
  m.tag = s.tag;
  m.dtype = static_cast<DType>(s.header.dtype);
  m.count = s.header.count;
  m.ndim = s.header.ndim;
  if (m.ndim >= 0) m.shape.assign(s.header.shape, s.header.shape + m.ndim);
  return m;
}

}  // namespace

P2pSendOp::P2pSendOp(OpInfo info, std::shared_ptr<CommHandles> comm, Buffer buf,
                     const std::optional<std::vector<int64_t>>& shape, std::unique_ptr<GpuStaging> staging)
    : MpiOp(info, comm, buf, Buffer{nullptr, 0, buf.dtype, buf.device}, {}, 0.0, std::move(staging)),
      header_(std::make_shared<P2pHeader>()) {
  header_->magic = kMagic;
  header_->version = kVersion;
  header_->dtype = static_cast<int32_t>(buf.dtype);
  header_->tag = info.tag;
  header_->count = buf.count;
  if (shape) {  // HostTransport::send_shaped checked its length and product
    header_->ndim = static_cast<int16_t>(shape->size());
    std::copy(shape->begin(), shape->end(), header_->shape);
  }
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

P2pRecvOp::P2pRecvOp(OpInfo info, std::shared_ptr<CommHandles> comm, Buffer buf, bool allocate,
                     std::unique_ptr<GpuStaging> staging)
    : QueuedOp(std::move(info)),
      comm_(std::move(comm)),
      buf_(buf),
      target_(buf),
      allocate_(allocate),
      want_src_(this->info.peer),
      staging_(std::move(staging)) {
  received = std::make_shared<P2pMessage>();
}

P2pRecvOp::~P2pRecvOp() {
  if (in_order_) comm_->recv_order.remove(info.tag, info.seq);
  bool pending = false;
  for (MPI_Request r : reqs_) pending = pending || r != MPI_REQUEST_NULL;
  if (pending) {  // abandoned on a broken communicator: MPI may still write into these
    if (staging_) staging_->leak();
    (void)drain_.release();
    if (received->data) new std::shared_ptr<HostBytes>(received->data);  // leaked on purpose: never freed
  }
}

void P2pRecvOp::start() {
  if (staging_) {
    staging_->to_host();
    target_ = staging_->host_out();
  }
  comm_->recv_order.enqueue(want_src_, info.tag, info.seq);
  in_order_ = true;
}

std::string P2pRecvOp::mismatch(const P2pHeader& h) const {
  if (h.count == buf_.count && h.dtype == static_cast<int32_t>(buf_.dtype)) return "";
  OpInfo sent = sender_info(h, comm_->rank);
  const char* what = sent.bytes != buf_.bytes() ? "sizes differ" : "dtypes or element counts differ";
  return info.describe() + " on the " + comm_->label + " matched rank " + std::to_string(source_) + "'s " +
         sent.describe() + " (" + what + ": the sender's " + std::to_string(sent.count) + " x " +
         dtype_name(sent.dtype) + " vs this recv's " + std::to_string(buf_.count) + " x " + dtype_name(buf_.dtype) +
         "). The payload was discarded; the communicator is now broken.";
}

void P2pRecvOp::post_payload(char* dst, int64_t bytes) {
  for_each_piece(dst, bytes, [&](char* p, int n) {
    reqs_.emplace_back();
    check(MPI_Irecv(p, n, MPI_BYTE, source_, info.tag, comm_->comm, &reqs_.back()), "recv");
  });
}

void P2pRecvOp::accept(const P2pHeader& h, int source) {
  source_ = source;
  info.peer = source;  // errors from here on name the sender
  StashedHeader s{source, info.tag, h};
  *received = message_of(s);
  const int64_t bytes = sender_info(h, source).bytes;
  if (allocate_) {  // now the op's size is known: stats and errors count what arrived
    info.count = h.count;
    info.dtype = static_cast<DType>(h.dtype);
    info.bytes = bytes;
    received->data = std::make_shared<HostBytes>(bytes);
    post_payload(received->data->data(), bytes);
    return;
  }
  mismatch_ = mismatch(h);
  if (mismatch_.empty()) {
    post_payload(static_cast<char*>(target_.ptr), target_.bytes());
  } else {  // take the sender's payload all the same, so that its send completes
    drain_ = std::make_unique<std::vector<char>>(static_cast<size_t>(bytes));
    post_payload(drain_->data(), bytes);
  }
}

bool P2pRecvOp::take_header() {
  // Only a receive no earlier one could compete with may take the next message: MPI's order.
  if (!comm_->recv_order.is_next(want_src_, info.tag, info.seq)) return false;
  {
    std::lock_guard<std::mutex> lk(comm_->p2p_mu);  // until the payload receive is posted
    std::optional<StashedHeader> h = comm_->stash.take(want_src_, info.tag);
    if (!h) h = read_header(*comm_, want_src_, info.tag, &info);
    if (!h) return false;
    accept(h->header, h->source);
  }
  comm_->recv_order.remove(info.tag, info.seq);  // after posting: the next recv matches after us
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

std::optional<P2pMessage> probe_header(CommHandles& comm, int src, int tag) {
  std::lock_guard<std::mutex> lk(comm.p2p_mu);
  if (auto s = comm.stash.peek(src, tag)) return message_of(*s);
  std::optional<StashedHeader> s = read_header(comm, src, tag, nullptr);
  if (!s) return std::nullopt;
  comm.stash.push(*s);  // its receive takes it from here
  return message_of(*s);
}

}  // namespace pycomm::mpi
