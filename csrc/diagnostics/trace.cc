#include "diagnostics/trace.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>

namespace pycomm {

namespace trace_detail {
std::atomic<bool> g_observing{false};
}

namespace {

// One thread's events. Written by its thread only (head released after each event); read under
// registry().mu by the drain, which re-reads head after copying to discard slots overwritten meanwhile.
struct Ring {
  Ring(uint64_t cap, int64_t tid) : cap(cap), events(new TraceEvent[cap]), thread_id(tid) {}
  const uint64_t cap;  // a power of two
  std::unique_ptr<TraceEvent[]> events;
  const int64_t thread_id;
  std::atomic<uint64_t> head{0};  // events written so far
  std::atomic<bool> thread_ended{false};
  uint64_t read = 0;  // under registry().mu: the first event not drained yet
};

struct Registry {
  std::mutex mu;  // taken when a thread makes its ring, and by readers; never per event
  std::vector<std::shared_ptr<Ring>> rings;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: threads may record during interpreter exit
  return *r;
}

std::atomic<bool> g_tracing{false};
std::atomic<bool> g_nvtx{false};
std::atomic<uint64_t> g_capacity{1 << 14};
std::atomic<uint32_t> g_next_comm{1};

void update_observing() {
  trace_detail::g_observing.store(g_tracing.load(std::memory_order_relaxed) || g_nvtx.load(std::memory_order_relaxed),
                                  std::memory_order_relaxed);
}

// The calling thread's ring; its holder marks it ended when the thread exits.
struct RingHolder {
  std::shared_ptr<Ring> ring;
  ~RingHolder() {
    if (ring) ring->thread_ended.store(true, std::memory_order_release);
  }
};

Ring& my_ring() {
  thread_local RingHolder holder;
  const uint64_t cap = g_capacity.load(std::memory_order_relaxed);
  if (!holder.ring || holder.ring->cap != cap) {
    auto ring = std::make_shared<Ring>(cap, static_cast<int64_t>(::syscall(SYS_gettid)));
    std::lock_guard<std::mutex> lk(registry().mu);
    if (holder.ring) holder.ring->thread_ended.store(true, std::memory_order_release);  // drained, then freed
    registry().rings.push_back(ring);
    holder.ring = std::move(ring);
  }
  return *holder.ring;
}

void push(const TraceEvent& e) {
  Ring& r = my_ring();
  const uint64_t h = r.head.load(std::memory_order_relaxed);
  r.events[h & (r.cap - 1)] = e;
  r.head.store(h + 1, std::memory_order_release);
}

uint64_t round_up_pow2(int64_t n) {
  uint64_t c = 16;
  while (c < static_cast<uint64_t>(n) && c < (uint64_t{1} << 40)) c <<= 1;
  return c;
}

// Copies ring events [from, head) that survive the copy; returns the index after the last one.
uint64_t copy_from(const Ring& r, uint64_t from, std::vector<TraceEvent>& out, uint64_t* lost) {
  const uint64_t head = r.head.load(std::memory_order_acquire);
  const uint64_t oldest = head > r.cap ? head - r.cap : 0;
  if (from < oldest) {
    if (lost) *lost += oldest - from;
    from = oldest;
  }
  out.reserve(head - from);
  for (uint64_t i = from; i < head; ++i) out.push_back(r.events[i & (r.cap - 1)]);
  // Slots the writer reused while we copied hold newer events: drop them from the front.
  const uint64_t after = r.head.load(std::memory_order_acquire);
  const uint64_t still = after > r.cap ? after - r.cap : 0;
  if (still > from) {
    const uint64_t gone = std::min<uint64_t>(still - from, out.size());
    out.erase(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(gone));
    if (lost) *lost += gone;
  }
  return head;
}

}  // namespace

const char* trace_phase_name(TracePhase p) {
  switch (p) {
    case TracePhase::kQueued:
      return "queued";
    case TracePhase::kOpCheck:
      return "op_check";
    case TracePhase::kWaitPeers:
      return "wait_peers";
    case TracePhase::kWire:
      return "wire";
    case TracePhase::kDone:
      return "done";
    case TracePhase::kFailed:
      return "failed";
    case TracePhase::kSpanBegin:
      return "span_begin";
    case TracePhase::kSpanEnd:
      return "span_end";
  }
  return "unknown";
}

void trace_enable(int64_t events_per_thread) {
  g_capacity.store(round_up_pow2(events_per_thread), std::memory_order_relaxed);
  g_tracing.store(true, std::memory_order_relaxed);
  update_observing();
}

void trace_disable() {
  g_tracing.store(false, std::memory_order_relaxed);
  update_observing();
}

bool trace_enabled() { return g_tracing.load(std::memory_order_relaxed); }

void observe_nvtx(bool on) {
  g_nvtx.store(on, std::memory_order_relaxed);
  update_observing();
}

int64_t trace_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

uint32_t trace_new_comm_id() { return g_next_comm.fetch_add(1, std::memory_order_relaxed); }

void copy_label(char* dst, size_t cap, const std::string& src) {
  const size_t n = std::min(cap, src.size());
  std::memcpy(dst, src.data(), n);
  if (n < cap) std::memset(dst + n, 0, cap - n);
}

void trace_op(const OpInfo& info, const TraceComm& comm, TracePhase phase, int64_t ts_ns, uint8_t flags) {
  if (!g_tracing.load(std::memory_order_relaxed)) return;  // observed for NVTX only
  TraceEvent e;
  e.ts_ns = ts_ns;
  e.seq = info.seq;
  e.collective_index = info.collective ? info.collective_index : -1;
  e.count = info.count;
  e.bytes = info.bytes;
  e.wire_bytes = info.bytes;
  e.comm_id = comm.id;
  e.comm_size = comm.size;
  e.rank = comm.rank;
  e.peer = info.peer;
  e.tag = info.tag;
  e.bucket = info.bucket;
  e.segment = -1;
  e.span_id = 0;
  e.dtype = static_cast<int8_t>(info.dtype);
  e.redop = static_cast<int8_t>(info.redop);
  e.phase = static_cast<uint8_t>(phase);
  e.flags = static_cast<uint8_t>(flags | (info.collective ? kTraceCollective : 0));
  copy_label(e.name, sizeof e.name, info.name);
  std::strncpy(e.algorithm, info.algorithm ? info.algorithm : "", sizeof e.algorithm);
  push(e);
}

void trace_record(const TraceEvent& event) {
  if (g_tracing.load(std::memory_order_relaxed)) push(event);
}

std::vector<TraceThreadEvents> trace_drain(uint64_t* dropped) {
  std::lock_guard<std::mutex> lk(registry().mu);
  std::vector<TraceThreadEvents> out;
  auto& rings = registry().rings;
  for (auto& r : rings) {
    TraceThreadEvents t{r->thread_id, {}};
    r->read = copy_from(*r, r->read, t.events, dropped);
    if (!t.events.empty()) out.push_back(std::move(t));
  }
  // A ring whose thread ended and whose events were all read has nothing more to give.
  rings.erase(std::remove_if(rings.begin(), rings.end(),
                             [](const std::shared_ptr<Ring>& r) {
                               return r->thread_ended.load(std::memory_order_acquire) &&
                                      r->read == r->head.load(std::memory_order_acquire);
                             }),
              rings.end());
  return out;
}

std::vector<TraceThreadEvents> trace_recent(size_t per_thread) {
  std::lock_guard<std::mutex> lk(registry().mu);
  std::vector<TraceThreadEvents> out;
  for (auto& r : registry().rings) {
    const uint64_t head = r->head.load(std::memory_order_acquire);
    TraceThreadEvents t{r->thread_id, {}};
    copy_from(*r, head > per_thread ? head - per_thread : 0, t.events, nullptr);
    if (!t.events.empty()) out.push_back(std::move(t));
  }
  return out;
}

void trace_clear() {
  std::lock_guard<std::mutex> lk(registry().mu);
  for (auto& r : registry().rings) r->read = r->head.load(std::memory_order_acquire);
}

}  // namespace pycomm
