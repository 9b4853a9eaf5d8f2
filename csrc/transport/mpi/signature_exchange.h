// Op matching on the MPI transport (diagnostics/op_check.h), always on: before a collective posts
// anything, the ranks allgather their op signatures over CommHandles::check by recursive doubling
// on point-to-point messages (Pow2Fold for other world sizes), polled with MPI_Test, so the caller's
// thread can run it and still give up at the stall deadline. Besides naming mismatched ops, this is
// what keeps a larger message from ever reaching a smaller buffer: Open MPI 4.1's shared-memory
// single-copy path writes a truncated large message past the receive buffer (the "double free or
// corruption" of mismatched ring all-reduces).
//
// A small all-reduce travels in the same messages (fuse()): each message is every signature known
// so far followed by the sender's partial sum (cut into pieces that MPI sends eagerly), so the op costs log2(size)
// message rounds in all. Messages are taken with MPI_Improbe at whatever size they arrive, so ops of every kind and
// size meet in the same exchange and any difference is named. A rank stops sending data once it has seen a signature
// that differs, and the result reaches the caller's buffer only when all matched.
//
// A broadcast whose data rides in op matching is matched one way (one_way()): the root sends its
// signature, the digest below and its data straight to every other rank and is done once those sends
// are; it never waits for theirs, as MPI's root returns once its eager send is out. Each receiver takes
// the root's first message of any tag, checks the signature, digest and size against its own op and
// raises MismatchError on a difference, its buffer untouched (the data lands in the exchange's own
// buffer at whatever size it came). The root cannot be told in the same call, so a receiver that refuses
// tells it (kRefusedTag): the root's next op on the communicator raises MismatchError naming both ops.
// Ranks that each took themselves for the root are caught through the digest: every rank folds each
// one-way broadcast's signature into CommHandles::one_way_digest, and every later op matching, one-way
// or not, compares the digests, so the next op raises on every rank that differs. A symmetric exchange
// that meets, while it waits, a one-way message tagged with its own op's index refuses that broadcast
// the same way (ranks disagree on the op). Ranks that all wait for a root that runs another op stall,
// and the stall report names their op and its root. Nothing reaches a caller's buffer unmatched.
//
// Ordering: all of a communicator's check traffic is sent from prepare(), which the queue (or the
// caller's thread, when the queue is idle) runs for one op at a time in submission order, so the
// per-(source, tag) order of MPI messages keeps consecutive ops apart.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/errors.h"
#include "diagnostics/op_check.h"
#include "transport/mpi/comm_handles.h"

namespace pycomm::mpi {

class SignatureExchange {
 public:
  ~SignatureExchange();
  // Carries an all-reduce of `buf` (`count` elements of `type`, `bytes` in all; count <= INT_MAX) with
  // `op` in the exchange. Before the first poll.
  void fuse(void* buf, int64_t count, MPI_Datatype type, MPI_Op op, int64_t bytes);
  // Carries an all-gather or a reduce-scatter in the exchange, `size` blocks of `block_count` elements of
  // `type` (`block_bytes` each): kGather gathers this rank's block `src` into `dst` (every block);
  // kScatter reduces `src` (every block, read only) with `op` and writes this rank's block of the result
  // to `dst`. `dst` is written only once all matched. On a power-of-two communicator each message carries
  // only the blocks its receiver still needs, as MPI's own schedules (recursive doubling of the known
  // blocks; recursive halving of the partial sums): size - 1 blocks per rank in all, not log2(size) whole
  // buffers. Other sizes all-reduce the whole buffer (bitwise OR of the zero-padded blocks; the
  // reduction). Before the first poll.
  enum class Blocks { kWhole, kGather, kScatter };
  void fuse_blocks(Blocks kind, const void* src, void* dst, int size, int64_t block_count, int64_t block_bytes,
                   MPI_Datatype type, MPI_Op op);
  // True once every rank's signature is in and equal to this op's (and a fused all-reduce's result
  // is in its buffer); throws MismatchError when one differs, leaving the buffer untouched.
  bool poll(const OpInfo& info, const CommHandles& comm);
  bool pending() const;  // requests posted and not finished
  // Matches a broadcast from `root` one way (above). Before the first poll; with fuse(), the receivers'
  // `buf` gets the root's bytes once matched.
  void one_way(int root) { root_ = root; }
  // A rank refused an op of this rank's, matched one way against its broadcast: throws MismatchError
  // naming both. Looks only on a rank that was a one-way root, unless `waiting` (a symmetric exchange).
  static void check_refused(const CommHandles& comm, bool waiting = false);

 private:
  struct Phase {
    int send_to = -1, recv_from = -1, tag = 0;
    bool result = false;  // the received data is the finished result (the fold's last message)
    int mask = 0;         // a doubling step's: which of the blocks go (fuse_blocks)
  };
  struct Buffers {  // on the heap: leaked if the exchange is abandoned while MPI may still use them
    // The message: its length in bytes, every signature known (size * kSignatureLen), every rank's
    // one-way digest (size), the partial sum; a one-way broadcast's: its length, the root's signature,
    // the root's digest, the data. It travels in pieces of at most 4 KiB.
    std::vector<int64_t> out;
    std::vector<int64_t> in;       // one received message
    std::vector<int64_t> packed;   // fuse_blocks: the head and the blocks one message carries
    std::vector<int64_t> refusal;  // to a one-way root: the reason, this rank's signature, the root's
  };
  void plan(const CommHandles& comm);
  void start_phase(const CommHandles& comm);
  bool phase_done(const CommHandles& comm);  // polls the current phase's requests
  void take_message(const Phase& ph, int64_t in_bytes, int rank, int size);
  // fuse_blocks' messages: the blocks a doubling step sends, and those it receives (in message order).
  void pack_blocks(const Phase& ph, int rank, int size);
  void unpack_blocks(const Phase& ph, const char* data, int rank, int size);
  int64_t phase_data_bytes(const Phase& ph, int size) const;  // a clean message's data
  void fill_data(int rank, int size);                         // the fused op's data into the first message
  void deliver(int rank, int size) const;                     // the result to the caller's buffer, all matched
  bool poll_one_way(const OpInfo& info, const CommHandles& comm);
  void take_root_message(const OpInfo& info, const CommHandles& comm);
  // Tells `root` why this rank refused its broadcast (reason: kRefused*; root_sig: its signature, or
  // null), then throws `error`.
  [[noreturn]] void refuse(const CommHandles& comm, int root, const int64_t* root_sig, int64_t reason,
                           const MismatchError& error);
  // Throws MismatchError naming both where `root_sig` (null: unknown) differs from this rank's op.
  void check_against(int root, const int64_t* root_sig, const CommHandles& comm) const;
  // While a symmetric exchange waits: a one-way broadcast's message for this op is one this rank does not run.
  void check_stray_root(const CommHandles& comm);
  // A one-way receiver got the root's message of another `tag` (`first`: its first `n` bytes): throws.
  [[noreturn]] void root_runs_another_op(int tag, const int64_t* first, int n, const CommHandles& comm);
  [[noreturn]] static void throw_refusal(const int64_t* refusal, int from, const CommHandles& comm);
  void send_pieces(const char* p, int64_t bytes, int to, int tag, const CommHandles& comm);
  static int64_t words_for(int64_t bytes) { return (bytes + 7) / 8; }  // the int64 words holding `bytes`
  int64_t sig_words(int size) const { return static_cast<int64_t>(size) * kSignatureLen; }
  // The message's head: its length, every signature known, then every rank's one-way digest.
  int64_t head_words(int size) const { return 1 + sig_words(size) + size; }

  std::unique_ptr<Buffers> bufs_;
  std::vector<Phase> phases_;
  size_t phase_ = 0;
  bool posted_ = false, finished_ = false;
  std::vector<MPI_Request> send_reqs_, recv_reqs_;  // the current phase's pieces
  bool probed_ = false;                             // the current phase's first piece is in (MPI_Improbe)
  int64_t in_bytes_ = 0;
  OpSignature mine_{};
  // The fused all-reduce (bytes_ == 0: none); `clean_`: every signature seen so far equals mine.
  void* buf_ = nullptr;
  int64_t count_ = 0, bytes_ = 0;
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  MPI_Op op_ = MPI_OP_NULL;
  bool clean_ = true;
  Blocks blocks_ = Blocks::kWhole;  // fuse_blocks' kind
  bool sparse_ = false;             // its messages carry blocks (a power-of-two communicator)
  const void* src_ = nullptr;       // fuse_blocks' source (buf_: its destination)
  int64_t block_count_ = 0, block_bytes_ = 0;
  int root_ = -1;            // one_way()'s root
  int one_way_tag_ = 0;      // this op's one-way message tag
  uint64_t digest_ = 0;      // CommHandles::one_way_digest when posted
  std::string bad_payload_;  // a matching signature came with data of another size: who, how much
};

}  // namespace pycomm::mpi
