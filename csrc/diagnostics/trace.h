// Trace events: each op's facts and the start of each of its phases, recorded into a ring buffer of
// the thread that reaches the phase (pycomm/tracing/__init__.py reads them out; pycomm.profile() writes chrome
// traces from them; the flight recorder dumps the last ones on a StallError).
//
// Off by default. Whether anything observes ops (tracing, or an NVTX tool attached) is one relaxed
// atomic load, read once per op when it is submitted (OpQueue::admit) and kept in the op, so every
// later hook of an op is a load of that bool and a branch that is never taken while nothing observes.
// When on, an event is a 128-byte copy into the calling thread's ring: no allocation (a thread's
// ring is allocated at its first event) and no lock. The ring holds a fixed number of events
// (pycomm's PYCOMM_TRACE_EVENTS); older events are overwritten and counted as dropped.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/transport.h"

namespace pycomm {

// A phase begins at its event; it ends where the op's next phase begins. kDone / kFailed end the op.
// kSpanBegin / kSpanEnd bracket a range recorded from Python (a compound op, a pipeline segment's step).
enum class TracePhase : uint8_t {
  kQueued = 0,     // submitted, waiting for earlier ops of its communicator
  kOpCheck = 1,    // op matching: this rank posts its signature (the signature exchange)
  kWaitPeers = 2,  // its signature is out; waiting for the other ranks' (they have not all reached the op)
  kWire = 3,       // on the wire / reducing
  kDone = 4,
  kFailed = 5,
  kSpanBegin = 6,
  kSpanEnd = 7,
};
const char* trace_phase_name(TracePhase p);

// Which communicator an event belongs to. `id` is unique in this process (trace_new_comm_id).
struct TraceComm {
  uint32_t id = 0;
  int32_t rank = 0;
  int32_t size = 1;
};

// One event. Trivially copyable, 128 bytes; pycomm/tracing/__init__.py reads it through trace_layout().
struct TraceEvent {
  int64_t ts_ns;             // steady clock (CLOCK_MONOTONIC), trace_now_ns()
  uint64_t seq;              // the op's number on its communicator
  int64_t collective_index;  // collectives before it on its communicator (-1: not a collective)
  int64_t count;             // elements
  int64_t bytes;             // logical bytes (the caller's data)
  int64_t wire_bytes;        // bytes of the buffer on the wire (after a cast or codec)
  uint32_t comm_id;
  int32_t comm_size;
  int32_t rank;  // this rank in the communicator
  int32_t peer;  // root, dst or src (a completed receive: its message's source)
  int32_t tag;
  int32_t bucket;      // fusion bucket, else -1
  int32_t segment;     // quantized pipeline segment, else -1
  uint32_t span_id;    // kSpanBegin/kSpanEnd pairs (0: an op's phase)
  int8_t dtype;        // DType code
  int8_t redop;        // ReduceOp, else -1
  uint8_t phase;       // TracePhase
  uint8_t flags;       // kTraceCollective | kTraceOnCaller
  char name[24];       // not NUL-terminated when 24 long
  char algorithm[20];  // "ring", "rabenseifner", "nccl", ... ("" unknown)
};
static_assert(sizeof(TraceEvent) == 128, "TraceEvent is two cache lines");
constexpr uint8_t kTraceCollective = 1, kTraceOnCaller = 2;

namespace trace_detail {
extern std::atomic<bool> g_observing;
}
// True while tracing is on or an NVTX tool is attached. One relaxed load.
inline bool observing() { return trace_detail::g_observing.load(std::memory_order_relaxed); }

// Tracing into rings of `events_per_thread` events (rounded up to a power of two). Events already
// recorded stay readable; a thread's ring of another size is replaced at its next event.
void trace_enable(int64_t events_per_thread);
void trace_disable();
bool trace_enabled();
// Whether NVTX ranges are made (an NVTX tool is attached): part of observing().
void observe_nvtx(bool on);

int64_t trace_now_ns();
uint32_t trace_new_comm_id();

// Records `phase` of `info` on `comm` at `ts_ns` into the calling thread's ring (when tracing).
void trace_op(const OpInfo& info, const TraceComm& comm, TracePhase phase, int64_t ts_ns, uint8_t flags = 0);
// Records a prepared event (Python's spans and ops of its transports) with ts_ns filled in.
void trace_record(const TraceEvent& event);
void copy_label(char* dst, size_t cap, const std::string& src);

// Events of one thread's ring.
struct TraceThreadEvents {
  int64_t thread_id;  // the OS thread id (gettid)
  std::vector<TraceEvent> events;
};
// Events recorded since the previous drain (oldest first), per thread; `dropped` gets the number
// overwritten before they could be read. Rings of ended threads are freed once drained.
std::vector<TraceThreadEvents> trace_drain(uint64_t* dropped);
// The last `per_thread` events of every ring, not consumed (the flight recorder).
std::vector<TraceThreadEvents> trace_recent(size_t per_thread);
// Forgets what the rings hold (a new profile starts from here).
void trace_clear();

}  // namespace pycomm
