#include "transport/mpi/signature_exchange.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/errors.h"
#include "transport/mpi/mpi_env.h"
#include "transport/mpi/pow2_fold.h"

namespace pycomm::mpi {
namespace {

// Tags on CommHandles::check: the fold's first message, then one per doubling step, then the fold's last.
constexpr int kFoldInTag = 1, kFirstStepTag = 2, kFoldOutTag = 64;
// One-way broadcasts: the root's message to each receiver, and a receiver's refusal back to the root.
// A one-way message's tag names its op (collective_index, the same on every rank for the same op), so a
// symmetric exchange can tell a root that runs a broadcast in its place from one already at a later op.
constexpr int kRefusedTag = 66, kOneWayTags = 128, kOneWaySpan = 16384;
// Why a receiver refused (the refusal's first word).
constexpr int64_t kRefusedSignature = 0, kRefusedHistory = 1, kRefusedPayload = 2, kRefusedSymmetric = 3;
constexpr int64_t kRootHeadWords = 2 + kSignatureLen;     // one-way message: length, signature, digest
constexpr int64_t kRefusalWords = 1 + 2 * kSignatureLen;  // a refusal: the reason, two signatures
constexpr int64_t kUnknown = -1;                          // a signature slot not heard of yet (op kinds are >= 0)
// Largest message: Open MPI's shared-memory transport sends up to 4 KiB (with its own header) at once;
// a larger one waits for the receiver's handshake (4 KiB all-reduce 8.7 us vs 3.6 us for MPI's).
constexpr int64_t kPieceBytes = 4032;

int one_way_tag(const OpInfo& info) {
  return kOneWayTags + static_cast<int>(std::max<int64_t>(info.collective_index, 0) % kOneWaySpan);
}

// Folds a signature (less its sequence number, which differs between ranks) into a one-way digest.
uint64_t fold(uint64_t digest, const int64_t* sig) {
  for (int i = 0; i < kSignatureLen - 1; ++i) digest = (digest ^ static_cast<uint64_t>(sig[i])) * 0x100000001b3ULL;
  return digest + 1;
}

std::string history_error(const std::string& label, int me, int other) {
  return "ranks disagree on an earlier broadcast on the " + label + ": rank " + std::to_string(me) + " and rank " +
         std::to_string(other) +
         " took part in different broadcasts since they last matched (a rank ran one as its root that the others "
         "received from another root or did not run). The communicator is now broken.";
}

}  // namespace

SignatureExchange::~SignatureExchange() {
  // Abandoned mid-exchange (a broken communicator): MPI may still use the buffers.
  if (pending()) (void)bufs_.release();
}

bool SignatureExchange::pending() const {
  for (MPI_Request r : send_reqs_)
    if (r != MPI_REQUEST_NULL) return true;
  for (MPI_Request r : recv_reqs_)
    if (r != MPI_REQUEST_NULL) return true;
  return false;
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
    phases_.push_back({peer, peer, tag, false, mask});
  }
  if (f.absorbs()) phases_.push_back({comm.rank - 1, -1, kFoldOutTag, false});
}

void SignatureExchange::start_phase(const CommHandles& comm) {
  const Phase& ph = phases_[phase_];
  probed_ = false;
  send_reqs_.clear();
  recv_reqs_.clear();
  if (ph.send_to < 0) return;
  // Data goes along only while every signature seen so far matched: a rank that differs sends none.
  if (clean_ && sparse_ && bytes_ > 0) {
    pack_blocks(ph, comm.rank, comm.size);
    send_pieces(reinterpret_cast<const char*>(bufs_->packed.data()), bufs_->packed[0], ph.send_to, ph.tag, comm);
    return;
  }
  const int64_t bytes = head_words(comm.size) * 8 + (clean_ ? bytes_ : 0);
  bufs_->out[0] = bytes;
  send_pieces(reinterpret_cast<const char*>(bufs_->out.data()), bytes, ph.send_to, ph.tag, comm);
}

void SignatureExchange::send_pieces(const char* p, int64_t bytes, int to, int tag, const CommHandles& comm) {
  for (int64_t off = 0; off < bytes; off += kPieceBytes) {
    send_reqs_.emplace_back();
    check(MPI_Isend(p + off, static_cast<int>(std::min(kPieceBytes, bytes - off)), MPI_BYTE, to, tag, comm.check,
                    &send_reqs_.back()),
          "op matching (MPI_Isend)");
  }
}

bool SignatureExchange::phase_done(const CommHandles& comm) {
  const Phase& ph = phases_[phase_];
  int done = 1;
  if (!send_reqs_.empty())
    check(MPI_Testall(static_cast<int>(send_reqs_.size()), send_reqs_.data(), &done, MPI_STATUSES_IGNORE),
          "op matching (MPI_Testall)");
  if (ph.recv_from < 0) return done != 0;
  if (!probed_) {
    // The first piece, at whatever size it comes (any op's exchange may meet this one), says how many
    // bytes follow in further pieces.
    int flag = 0;
    MPI_Message msg;
    MPI_Status st;
    // A one-way receiver takes the root's first message of any tag: the root's earlier messages are all
    // taken, so one of another tag says the root runs another op.
    const bool one_way = root_ >= 0;
    check(MPI_Improbe(ph.recv_from, one_way ? MPI_ANY_TAG : ph.tag, comm.check, &flag, &msg, &st),
          "op matching (MPI_Improbe)");
    if (!flag) {
      if (!one_way) {
        check_refused(comm, true);
        check_stray_root(comm);
      }
      return false;
    }
    int n = 0;
    check(MPI_Get_count(&st, MPI_BYTE, &n), "op matching (MPI_Get_count)");
    std::vector<int64_t>& in = bufs_->in;  // the first piece straight into the message's buffer
    // At least the longest message read before its size is checked (a refusal: throw_refusal).
    in.resize(static_cast<size_t>(std::max<int64_t>(words_for(n), kRefusalWords)));
    check(MPI_Mrecv(in.data(), n, MPI_BYTE, &msg, MPI_STATUS_IGNORE), "op matching (MPI_Mrecv)");
    if (st.MPI_TAG != ph.tag) root_runs_another_op(st.MPI_TAG, in.data(), n, comm);
    probed_ = true;
    in_bytes_ = n >= 8 && in[0] >= n ? in[0] : n;  // n < in[0] <= kPieceBytes: not from this exchange
    in.resize(static_cast<size_t>(words_for(in_bytes_)));
    char* p = reinterpret_cast<char*>(in.data());
    for (int64_t off = n; off < in_bytes_; off += kPieceBytes) {
      recv_reqs_.emplace_back();
      check(MPI_Irecv(p + off, static_cast<int>(std::min(kPieceBytes, in_bytes_ - off)), MPI_BYTE, ph.recv_from, ph.tag,
                      comm.check, &recv_reqs_.back()),
            "op matching (MPI_Irecv)");
    }
  }
  int got = 1;
  if (!recv_reqs_.empty())
    check(MPI_Testall(static_cast<int>(recv_reqs_.size()), recv_reqs_.data(), &got, MPI_STATUSES_IGNORE),
          "op matching (MPI_Testall)");
  return done && got;
}

void SignatureExchange::take_message(const Phase& ph, int64_t in_bytes, int rank, int size) {
  const int64_t words = sig_words(size), head = head_words(size);
  int64_t* known = bufs_->out.data() + 1;  // after the length word
  const int64_t* theirs = bufs_->in.data() + 1;
  if (in_bytes < head * 8) {  // cannot come from this exchange on the same communicator
    clean_ = false;
    return;
  }
  int64_t* known_digests = known + words;
  const int64_t* their_digests = theirs + words;
  for (int64_t r = 0; r < words; r += kSignatureLen)
    if (theirs[r] != kUnknown && known[r] == kUnknown) {
      std::memcpy(known + r, theirs + r, kSignatureLen * 8);
      known_digests[r / kSignatureLen] = their_digests[r / kSignatureLen];
    }
  // The sequence number (last field) is not compared, as in check_signatures.
  const int64_t my_digest = static_cast<int64_t>(digest_);
  for (int64_t r = 0; r < words && clean_; r += kSignatureLen)
    if (known[r] != kUnknown && (std::memcmp(known + r, mine_.data(), (kSignatureLen - 1) * 8) != 0 ||
                                 known_digests[r / kSignatureLen] != my_digest))
      clean_ = false;
  if (!clean_) return;
  // An equal signature always comes with its data, and an op that carries none with none: a peer that
  // decided otherwise (another eager limit) is named by poll(). Nothing of its message is used (it is
  // ours, the caller's buffer untouched).
  const int64_t expected = phase_data_bytes(ph, size);
  if (in_bytes != head * 8 + expected) {
    clean_ = false;
    bad_payload_ = "rank " + std::to_string(ph.recv_from) + " sent " + std::to_string(in_bytes - head * 8) +
                   " bytes of data with the same op, expected " + std::to_string(expected);
    return;
  }
  if (bytes_ == 0) return;
  void* acc = known + head - 1;
  const void* data = theirs + head - 1;
  if (sparse_)
    unpack_blocks(ph, static_cast<const char*>(data), rank, size);
  else if (ph.result)
    std::memcpy(acc, data, static_cast<size_t>(bytes_));
  else
    check(MPI_Reduce_local(data, acc, static_cast<int>(count_), type_, op_), "allreduce (MPI_Reduce_local)");
}

bool SignatureExchange::poll(const OpInfo& info, const CommHandles& comm) {
  if (finished_) return true;
  check_refused(comm);
  if (root_ >= 0 && comm.size > 1) return poll_one_way(info, comm);
  if (!posted_) {
    posted_ = true;
    mine_ = op_signature(info);
    digest_ = comm.one_way_digest.load();
    one_way_tag_ = one_way_tag(info);
    bufs_ = std::make_unique<Buffers>();
    const int64_t words = sig_words(comm.size), head = head_words(comm.size);
    bufs_->out.assign(static_cast<size_t>(head + words_for(bytes_)), kUnknown);
    std::memcpy(bufs_->out.data() + 1 + static_cast<int64_t>(comm.rank) * kSignatureLen, mine_.data(),
                kSignatureLen * 8);
    bufs_->out[1 + words + comm.rank] = static_cast<int64_t>(digest_);
    sparse_ = blocks_ != Blocks::kWhole && Pow2Fold(comm.rank, comm.size).power_of_two();  // the fold: whole
    if (bytes_ > 0) fill_data(comm.rank, comm.size);
    plan(comm);
    if (!phases_.empty()) start_phase(comm);
  }
  while (phase_ < phases_.size()) {
    if (!phase_done(comm)) return false;
    const Phase& ph = phases_[phase_];
    if (ph.recv_from >= 0) take_message(ph, in_bytes_, comm.rank, comm.size);
    if (++phase_ < phases_.size()) start_phase(comm);
  }
  finished_ = true;
  const int64_t words = sig_words(comm.size);
  check_signatures(bufs_->out.data() + 1, comm.size, comm.rank, comm.label);
  for (int r = 0; r < comm.size; ++r)
    if (bufs_->out[1 + words + r] != static_cast<int64_t>(digest_))
      throw MismatchError(history_error(comm.label, comm.rank, r));
  // Every signature agreed but data went missing on the way (a peer that sent a payload of another size,
  // or stopped sending one): refused, so a partial result never reaches the caller's buffer.
  if (!clean_)
    throw MismatchError("op matching on the " + comm.label + " refused " + info.name +
                        "'s data: " + (bad_payload_.empty() ? std::string("a peer sent none") : bad_payload_) +
                        " (PYCOMM_EAGER_BYTES differs between ranks?). The caller's buffer is untouched; the "
                        "communicator is now broken.");
  if (bytes_ > 0) deliver(comm.rank, comm.size);
  return true;
}

bool SignatureExchange::poll_one_way(const OpInfo& info, const CommHandles& comm) {
  const bool root = comm.rank == root_;
  if (!posted_) {
    posted_ = true;
    mine_ = op_signature(info);
    digest_ = comm.one_way_digest.load();
    one_way_tag_ = one_way_tag(info);
    bufs_ = std::make_unique<Buffers>();
    if (root) {
      const int64_t bytes = kRootHeadWords * 8 + bytes_;
      std::vector<int64_t>& out = bufs_->out;
      out.assign(static_cast<size_t>(words_for(bytes)), 0);
      out[0] = bytes;
      std::memcpy(out.data() + 1, mine_.data(), kSignatureLen * 8);
      out[1 + kSignatureLen] = static_cast<int64_t>(digest_);
      if (bytes_ > 0) std::memcpy(out.data() + kRootHeadWords, buf_, static_cast<size_t>(bytes_));
      comm.one_way_digest.store(fold(digest_, mine_.data()));
      comm.rooted_one_way.store(true);
      for (int r = 0; r < comm.size; ++r)
        if (r != root_) send_pieces(reinterpret_cast<const char*>(out.data()), bytes, r, one_way_tag_, comm);
    } else {
      phases_.push_back({-1, root_, one_way_tag_, false});
      start_phase(comm);
    }
  }
  if (root) {  // done once the sends are: the buffer is ours, the data already copied into it
    int done = 1;
    check(MPI_Testall(static_cast<int>(send_reqs_.size()), send_reqs_.data(), &done, MPI_STATUSES_IGNORE),
          "op matching (MPI_Testall)");
    finished_ = done != 0;
    return finished_;
  }
  if (!phase_done(comm)) return false;
  take_root_message(info, comm);
  finished_ = true;
  return true;
}

void SignatureExchange::take_root_message(const OpInfo& info, const CommHandles& comm) {
  const int64_t* in = bufs_->in.data();
  const int64_t* root_sig = in_bytes_ >= kRootHeadWords * 8 ? in + 1 : nullptr;
  try {
    check_against(root_, root_sig, comm);
  } catch (const MismatchError& e) {
    refuse(comm, root_, root_sig, kRefusedSignature, e);
  }
  if (in_bytes_ < kRootHeadWords * 8)  // from no broadcast's matching on this communicator
    refuse(comm, root_, root_sig, kRefusedPayload,
           MismatchError("op matching on the " + comm.label + " refused " + info.name + ": rank " +
                         std::to_string(root_) + " sent " + std::to_string(in_bytes_) +
                         " bytes, not a broadcast's signature. The communicator is now broken."));
  if (in[1 + kSignatureLen] != static_cast<int64_t>(digest_))
    refuse(comm, root_, root_sig, kRefusedHistory, MismatchError(history_error(comm.label, comm.rank, root_)));
  if (in_bytes_ != kRootHeadWords * 8 + bytes_)
    refuse(comm, root_, root_sig, kRefusedPayload,
           MismatchError("op matching on the " + comm.label + " refused " + info.name + "'s data: rank " +
                         std::to_string(root_) + " sent " + std::to_string(in_bytes_ - kRootHeadWords * 8) +
                         " bytes of data with the same op, expected " + std::to_string(bytes_) +
                         " (PYCOMM_EAGER_BYTES differs between ranks?). The caller's buffer is untouched; the "
                         "communicator is now broken."));
  comm.one_way_digest.store(fold(digest_, mine_.data()));
  if (bytes_ > 0) std::memcpy(buf_, in + kRootHeadWords, static_cast<size_t>(bytes_));
}

void SignatureExchange::refuse(const CommHandles& comm, int root, const int64_t* root_sig, int64_t reason,
                               const MismatchError& error) {
  // Sent before the throw, never waited for: the buffers are leaked with the exchange if MPI still has them.
  std::vector<int64_t>& msg = bufs_->refusal;
  msg.assign(kRefusalWords, 0);
  msg[0] = reason;
  std::memcpy(msg.data() + 1, mine_.data(), kSignatureLen * 8);
  if (root_sig != nullptr) std::memcpy(msg.data() + 1 + kSignatureLen, root_sig, kSignatureLen * 8);
  send_reqs_.emplace_back();
  check(MPI_Isend(msg.data(), static_cast<int>(msg.size() * 8), MPI_BYTE, root, kRefusedTag, comm.check,
                  &send_reqs_.back()),
        "op matching (MPI_Isend)");
  throw error;
}

void SignatureExchange::check_against(int root, const int64_t* root_sig, const CommHandles& comm) const {
  // Every rank's signature as this rank knows them: its own everywhere but in the root's slot.
  std::vector<int64_t> all(static_cast<size_t>(sig_words(comm.size)));
  for (int r = 0; r < comm.size; ++r) std::memcpy(all.data() + r * kSignatureLen, mine_.data(), kSignatureLen * 8);
  if (root_sig != nullptr) std::memcpy(all.data() + root * kSignatureLen, root_sig, kSignatureLen * 8);
  check_signatures(all.data(), comm.size, comm.rank, comm.label);
}

void SignatureExchange::check_stray_root(const CommHandles& comm) {
  // A one-way message tagged with this op's index: its root runs a broadcast where this rank runs another op.
  int flag = 0;
  MPI_Message msg;
  MPI_Status st;
  check(MPI_Improbe(MPI_ANY_SOURCE, one_way_tag_, comm.check, &flag, &msg, &st), "op matching (MPI_Improbe)");
  if (!flag) return;
  int n = 0;
  check(MPI_Get_count(&st, MPI_BYTE, &n), "op matching (MPI_Get_count)");
  int64_t first[kPieceBytes / 8] = {};
  check(MPI_Mrecv(first, n, MPI_BYTE, &msg, MPI_STATUS_IGNORE), "op matching (MPI_Mrecv)");
  const int root = st.MPI_SOURCE;
  const int64_t* root_sig = n >= kRootHeadWords * 8 ? first + 1 : nullptr;
  try {
    check_against(root, root_sig, comm);
  } catch (const MismatchError& e) {
    refuse(comm, root, root_sig, kRefusedSignature, e);
  }
  refuse(comm, root, root_sig, kRefusedSymmetric,
         MismatchError("rank " + std::to_string(root) + " ran a broadcast one way (a host buffer) where rank " +
                       std::to_string(comm.rank) + " ran the same op on the " + comm.label +
                       " with every rank's signature (a GPU buffer, or PYCOMM_EAGER_BYTES differs between ranks?). The "
                       "communicator is now broken."));
}

void SignatureExchange::check_refused(const CommHandles& comm, bool waiting) {
  if (!waiting && !comm.rooted_one_way.load(std::memory_order_relaxed)) return;
  int flag = 0;
  MPI_Message msg;
  MPI_Status st;
  check(MPI_Improbe(MPI_ANY_SOURCE, kRefusedTag, comm.check, &flag, &msg, &st), "op matching (MPI_Improbe)");
  if (!flag) return;
  int64_t got[kRefusalWords] = {};
  check(MPI_Mrecv(got, sizeof(got), MPI_BYTE, &msg, MPI_STATUS_IGNORE), "op matching (MPI_Mrecv)");
  throw_refusal(got, st.MPI_SOURCE, comm);
}

void SignatureExchange::throw_refusal(const int64_t* got, int from, const CommHandles& comm) {
  const std::string prefix = "rank " + std::to_string(from) + " refused this rank's (" + std::to_string(comm.rank) +
                             ") op, matched one way against its broadcast (this rank hears of it at its next op): ";
  if (got[0] == kRefusedSignature) {
    // Both signatures as check_signatures names them: this rank's op, the refusing rank's.
    std::vector<int64_t> all(static_cast<size_t>(static_cast<int64_t>(comm.size) * kSignatureLen));
    for (int r = 0; r < comm.size; ++r)
      std::memcpy(all.data() + r * kSignatureLen, got + 1 + kSignatureLen, kSignatureLen * 8);
    std::memcpy(all.data() + from * kSignatureLen, got + 1, kSignatureLen * 8);
    try {
      check_signatures(all.data(), comm.size, comm.rank, comm.label);
    } catch (const MismatchError& e) {
      throw MismatchError(prefix + e.what());
    }
  }
  const std::string why = got[0] == kRefusedHistory ? history_error(comm.label, comm.rank, from)
                          : got[0] == kRefusedSymmetric
                              ? "it ran the same op with every rank's signature (a GPU buffer, or PYCOMM_EAGER_BYTES "
                                "differs between ranks?). The communicator is "
                                "now broken."
                              : "it got data of another size than its op's (PYCOMM_EAGER_BYTES differs between "
                                "ranks?). The communicator is now broken.";
  throw MismatchError(prefix + why);
}

void SignatureExchange::root_runs_another_op(int tag, const int64_t* first, int n, const CommHandles& comm) {
  if (tag == kRefusedTag) throw_refusal(first, root_, comm);  // it refused a broadcast this rank was the root of
  // Another op's one-way message (the ranks count their ops differently): its signature comes first.
  // A symmetric exchange's: its length, then every signature known, the root's among them.
  const int64_t* root_sig = tag >= kOneWayTags ? (n >= kRootHeadWords * 8 ? first + 1 : nullptr)
                            : n >= (1 + (root_ + 1) * kSignatureLen) * 8 ? first + 1 + root_ * kSignatureLen
                                                                         : nullptr;
  if (root_sig != nullptr && root_sig[0] == kUnknown) root_sig = nullptr;
  try {
    check_against(root_, root_sig, comm);
  } catch (const MismatchError& e) {
    refuse(comm, root_, root_sig, kRefusedSignature, e);
  }
  refuse(comm, root_, root_sig, kRefusedSymmetric,
         MismatchError(
             "rank " + std::to_string(root_) + " ran this broadcast on the " + comm.label +
             " with every rank's signature (a GPU buffer, or PYCOMM_EAGER_BYTES differs between ranks?) where rank " +
             std::to_string(comm.rank) + " matched it one way. The communicator is now broken."));
}

}  // namespace pycomm::mpi
