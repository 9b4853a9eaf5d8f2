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
// Ordering: all of a communicator's check traffic is sent from prepare(), which the queue (or the
// caller's thread, when the queue is idle) runs for one op at a time in submission order, so the
// per-(source, tag) order of MPI messages keeps consecutive ops apart.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "diagnostics/op_check.h"
#include "transport/mpi/comm_handles.h"

namespace pycomm::mpi {

class SignatureExchange {
 public:
  ~SignatureExchange();
  // Carries an all-reduce of `buf` (`count` elements of `type`, `bytes` in all; count <= INT_MAX) with
  // `op` in the exchange. Before the first poll.
  void fuse(void* buf, int64_t count, MPI_Datatype type, MPI_Op op, int64_t bytes);
  // True once every rank's signature is in and equal to this op's (and a fused all-reduce's result
  // is in its buffer); throws MismatchError when one differs, leaving the buffer untouched.
  bool poll(const OpInfo& info, const CommHandles& comm);
  bool pending() const;  // requests posted and not finished

 private:
  struct Phase {
    int send_to = -1, recv_from = -1, tag = 0;
    bool result = false;  // the received data is the finished result (the fold's last message)
  };
  struct Buffers {  // on the heap: leaked if the exchange is abandoned while MPI may still use them
    // The message: its length in bytes, every signature known (size * kSignatureLen), the partial sum.
    // It travels in pieces of at most 4 KiB.
    std::vector<int64_t> out;
    std::vector<int64_t> in;  // one received message
  };
  void plan(const CommHandles& comm);
  void start_phase(const CommHandles& comm);
  bool phase_done(const CommHandles& comm);  // polls the current phase's requests
  void take_message(const Phase& ph, int64_t in_bytes, int size);
  int64_t sig_words(int size) const { return static_cast<int64_t>(size) * kSignatureLen; }

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
  std::string bad_payload_;  // a matching signature came with data of another size: who, how much
};

}  // namespace pycomm::mpi
