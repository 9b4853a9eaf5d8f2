#include "transport/mpi/signature_exchange.h"

#include <cstring>

#include "transport/mpi/mpi_env.h"
#include "transport/mpi/pow2_fold.h"

namespace pycomm::mpi {
namespace {

// Tags on CommHandles::check: the fold's first message, then one per doubling step, then the fold's last.
constexpr int kFoldInTag = 1, kFirstStepTag = 2, kFoldOutTag = 64;
constexpr int64_t kUnknown = -1;  // a signature slot not heard of yet (op kinds are >= 0)

int64_t words_for(int64_t bytes) { return (bytes + 7) / 8; }

}  // namespace

SignatureExchange::~SignatureExchange() {
  // Abandoned mid-exchange (a broken communicator): MPI may still use the buffers.
  if (pending()) (void)bufs_.release();
}

bool SignatureExchange::pending() const {
  return send_req_ != MPI_REQUEST_NULL || recv_req_ != MPI_REQUEST_NULL;
}

void SignatureExchange::fuse(void* buf, int64_t count, MPI_Datatype type, MPI_Op op, int64_t bytes) {
  buf_ = buf;
  count_ = count;
  type_ = type;
  op_ = op;
  bytes_ = bytes;
}

void SignatureExchange::plan(const CommHandles& comm) {
  const Pow2Fold f(comm.rank, comm.size);
  if (f.extra()) {
    phases_.push_back({comm.rank + 1, -1, kFoldInTag, false});
    phases_.push_back({-1, comm.rank + 1, kFoldOutTag, true});
    return;
  }
  if (f.absorbs()) phases_.push_back({-1, comm.rank - 1, kFoldInTag, false});
  int tag = kFirstStepTag;
  for (int mask = 1; mask < f.pof2; mask <<= 1, ++tag) {
    const int peer = f.real(f.vrank() ^ mask);
    phases_.push_back({peer, peer, tag, false});
  }
  if (f.absorbs()) phases_.push_back({comm.rank - 1, -1, kFoldOutTag, false});
}

void SignatureExchange::start_phase(const CommHandles& comm) {
  const Phase& ph = phases_[phase_];
  probed_ = false;
  if (ph.send_to < 0) return;
  // Data goes along only while every signature seen so far matched: a rank that differs sends none.
  const int64_t bytes = sig_words(comm.size) * 8 + (clean_ ? bytes_ : 0);
  check(MPI_Isend(bufs_->out.data(), static_cast<int>(bytes), MPI_BYTE, ph.send_to, ph.tag, comm.check, &send_req_),
        "op matching (MPI_Isend)");
}

bool SignatureExchange::phase_done(const CommHandles& comm) {
  const Phase& ph = phases_[phase_];
  int done = 1;
  if (send_req_ != MPI_REQUEST_NULL) check(MPI_Test(&send_req_, &done, MPI_STATUS_IGNORE), "op matching (MPI_Test)");
  if (ph.recv_from < 0) return done != 0;
  if (!probed_) {
    int flag = 0;
    MPI_Message msg;
    MPI_Status st;
    check(MPI_Improbe(ph.recv_from, ph.tag, comm.check, &flag, &msg, &st), "op matching (MPI_Improbe)");
    if (!flag) return false;
    int n = 0;
    check(MPI_Get_count(&st, MPI_BYTE, &n), "op matching (MPI_Get_count)");
    in_bytes_ = n;
    bufs_->in.assign(static_cast<size_t>(words_for(n)), 0);
    check(MPI_Imrecv(bufs_->in.data(), n, MPI_BYTE, &msg, &recv_req_), "op matching (MPI_Imrecv)");
    probed_ = true;
  }
  int got = 1;
  if (recv_req_ != MPI_REQUEST_NULL) check(MPI_Test(&recv_req_, &got, MPI_STATUS_IGNORE), "op matching (MPI_Test)");
  return done && got;
}

void SignatureExchange::take_message(const Phase& ph, int64_t in_bytes, int size) {
  const int64_t words = sig_words(size);
  int64_t* known = bufs_->out.data();
  const int64_t* theirs = bufs_->in.data();
  if (in_bytes < words * 8) {  // cannot come from this exchange on the same communicator
    clean_ = false;
    return;
  }
  for (int64_t r = 0; r < words; r += kSignatureLen)
    if (theirs[r] != kUnknown && known[r] == kUnknown) std::memcpy(known + r, theirs + r, kSignatureLen * 8);
  // The sequence number (last field) is not compared, as in check_signatures.
  for (int64_t r = 0; r < words && clean_; r += kSignatureLen)
    if (known[r] != kUnknown && std::memcmp(known + r, mine_.data(), (kSignatureLen - 1) * 8) != 0) clean_ = false;
  if (bytes_ == 0 || !clean_) return;
  if (in_bytes != words * 8 + bytes_) {  // an equal signature always comes with its data
    clean_ = false;
    return;
  }
  void* acc = bufs_->out.data() + words;
  const void* data = bufs_->in.data() + words;
  if (ph.result) std::memcpy(acc, data, static_cast<size_t>(bytes_));
  else check(MPI_Reduce_local(data, acc, static_cast<int>(count_), type_, op_), "allreduce (MPI_Reduce_local)");
}

bool SignatureExchange::poll(const OpInfo& info, const CommHandles& comm) {
  if (finished_) return true;
  if (!posted_) {
    posted_ = true;
    mine_ = op_signature(info);
    bufs_ = std::make_unique<Buffers>();
    const int64_t words = sig_words(comm.size);
    bufs_->out.assign(static_cast<size_t>(words + words_for(bytes_)), kUnknown);
    std::memcpy(bufs_->out.data() + static_cast<int64_t>(comm.rank) * kSignatureLen, mine_.data(), kSignatureLen * 8);
    if (bytes_ > 0) std::memcpy(bufs_->out.data() + words, buf_, static_cast<size_t>(bytes_));
    plan(comm);
    if (!phases_.empty()) start_phase(comm);
  }
  while (phase_ < phases_.size()) {
    if (!phase_done(comm)) return false;
    const Phase& ph = phases_[phase_];
    if (ph.recv_from >= 0) take_message(ph, in_bytes_, comm.size);
    if (++phase_ < phases_.size()) start_phase(comm);
  }
  finished_ = true;
  check_signatures(bufs_->out.data(), comm.size, comm.rank, comm.label);
  if (bytes_ > 0) std::memcpy(buf_, bufs_->out.data() + sig_words(comm.size), static_cast<size_t>(bytes_));
  return true;
}

}  // namespace pycomm::mpi
