// Which pending receive of one MPI communicator may take which message. Every pycomm message is a
// header then its payload on the same (source, tag); a receive takes a header (MPI_Improbe +
// MPI_Mrecv, so no other thread can take the same one) and then posts its payload receive from the
// header's source. Two rules keep a payload from being taken as someone else's header:
// - RecvOrder: receives that could match the same messages take their headers in the order they
//   started (MPI's order), each only once the one before has posted its payload receive;
// - HeaderStash: a header a probe took (to read its shape) waits here for its receive; a receive or
//   probe looks here first and goes to MPI only when nothing stashed matches it, since the stashed
//   header's payload is then the next unclaimed message of that (source, tag).
// Taking a header and posting its payload happen under CommHandles::p2p_mu (probes take it too).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>

namespace pycomm::mpi {

// The 96 bytes in front of every point-to-point payload.
struct P2pHeader {
  uint32_t magic = 0;
  uint16_t version = 0;
  int16_t ndim = -1;  // -1: a plain send (no shape); else shape[0..ndim) (send_tensor)
  int32_t dtype = 0;  // a DType code
  int32_t tag = 0;
  int64_t count = 0;  // elements
  int64_t seq = 0;    // the send's sequence number on its communicator (named in errors)
  int64_t shape[8] = {};
};
static_assert(sizeof(P2pHeader) == 96, "the header is 96 bytes on the wire");

// src / tag: a rank or -1 (any; pycomm's kAnySource / kAnyTag, not MPI's constants).
class RecvOrder {
 public:
  void enqueue(int src, int tag, uint64_t seq);
  // No earlier pending receive on `tag` could take the same message (same source, or either is any).
  bool is_next(int src, int tag, uint64_t seq);
  void remove(int tag, uint64_t seq);  // header taken, or failed; absent: nothing

 private:
  std::mutex mu_;
  std::map<int, std::deque<std::pair<uint64_t, int>>> waiting_;  // tag -> (seq, src) in start order
};

struct StashedHeader {
  int source = -1;
  int tag = -1;
  P2pHeader header;
};

// Guarded by CommHandles::p2p_mu.
class HeaderStash {
 public:
  void push(StashedHeader h) { headers_.push_back(h); }
  // The oldest stashed header matching (src, tag), removed (take) or left (peek).
  std::optional<StashedHeader> take(int src, int tag);
  std::optional<StashedHeader> peek(int src, int tag) const;

 private:
  std::deque<StashedHeader> headers_;
};

}  // namespace pycomm::mpi
