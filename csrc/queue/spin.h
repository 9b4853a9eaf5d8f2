// Yield-spinning before blocking on a condition variable. On an oversubscribed node (many ranks
// on few cores) a futex wake-up can cost milliseconds of scheduling latency, far more than a
// small collective; yielding keeps the core available to whoever has work.
#pragma once

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace pycomm {

// PYCOMM_SPIN_US (fixed at first use): how long to yield-spin before blocking. 0 disables.
std::chrono::microseconds spin_budget();

// True once pred() holds; false when `budget` passed first.
template <typename Pred>
bool spin_until(Pred pred, std::chrono::microseconds budget = spin_budget()) {
  if (pred()) return true;  // already (an op run on the caller's thread): no clock read
  const auto end = std::chrono::steady_clock::now() + budget;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    sched_yield();
  }
  return true;
}

// The transports report whether this node runs more ranks than the cores they may use (once any
// communicator saw it, it stays so); then pollers yield (as Open MPI's own polling does). Otherwise
// they keep their core: a yield hands it to any other busy process for a whole time slice (2 ranks
// beside two busy loops: 1 MiB all-reduce 25x slower than MPI's).
void note_node_oversubscribed(bool oversubscribed);
bool node_oversubscribed();
// More runnable threads on the machine than online CPUs right now (other jobs, busy loops), from
// /proc/loadavg and sysconf (both machine-wide, also inside a container), read at most every 10 ms.
// Not a reason to yield (with it, 2 ranks beside 2 busy loops: 1 MiB all-reduce 0.02x mpi4py); P2P
// schedules then keep a whole step in flight: 64 MiB all-reduce 1.07-1.15x -> 1.76-1.86x, 16 MiB
// all-gather 0.45-0.98x -> 0.98-1.32x there, 64 KiB-1 MiB unchanged, the idle machine unchanged.
bool machine_crowded();

// More runnable threads on the machine than its CPUs can take beside this node's ranks, each of which may
// have its compute thread and its progress thread runnable (`note_ranks_on_node`): other jobs, busy loops,
// data loaders. Read like machine_crowded(). A poller that yields then hands its core round the other
// jobs' threads and costs its own rank's compute its place (a user's script beside a busy loop per core:
// AdamW's step 7.8 ms of CPU in 35-42 ms of wall time, against 7.2 ms for DDP, whose gloo threads sleep).
void note_ranks_on_node(int ranks);
bool cores_contended();

// Polling a transport: spin while progress is likely (yielding the core on an oversubscribed node),
// then sleep. An irecv that waits minutes for its sender must not burn a core.
class Backoff {
 public:
  // `background`: the progress thread's polls, which yield on any node: the core is better spent on
  // the rank's own thread (packing the next bucket, the backward pass) than on waiting for the network.
  // ResNet-50's 161 gradients, allreduce_coalesced (async) on 2 ranks of 2 cores, 4 alternating runs
  // each: 0.74-0.77x flat mpi4py's time without, 0.67-0.73x with. Past kBackgroundYields without
  // progress, and at once where the cores are contended, they nap instead (kFirstNap doubling up to
  // kLongestNap, reset by progress): a sleeping poller leaves the core to the compute of its rank
  // rather than to whichever job the scheduler picks next.
  // Callers' threads keep their core unless ranks outnumber cores (a yield there hands it to a busy
  // neighbour for a whole time slice).
  explicit Backoff(bool background = false) : background_(background) {}
  void progressed() {
    spins_ = 0;
    nap_ = std::chrono::microseconds(0);
  }
  void idle() {
    if (spins_ < kFreeSpins) {
      if (++spins_ < kFreeSpins) return;
      // The idle time counts from here: a clock read per poller costs a small op more than the spins
      // before it (perf: clock_gettime was 7% of a 1.9 us op, six reads).
      idle_since_ = std::chrono::steady_clock::now();
    }
    if (background_) {
      if (cores_contended() || std::chrono::steady_clock::now() - idle_since_ >= kBackgroundYields) {
        nap_ = nap_.count() == 0 ? kFirstNap : std::min(2 * nap_, kLongestNap);
        std::this_thread::sleep_for(nap_);
      } else {
        sched_yield();
      }
      return;
    }
    if (std::chrono::steady_clock::now() - idle_since_ < std::chrono::seconds(1)) {
      if (node_oversubscribed()) sched_yield();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }

 private:
  static constexpr int kFreeSpins = 256;
  static constexpr std::chrono::microseconds kFirstNap{20}, kLongestNap{500};
  // The progress thread yields for this long without progress (a peer late to a collective, an irecv
  // whose sender computes), then naps: it no longer holds a core for a whole second per late peer.
  static constexpr std::chrono::milliseconds kBackgroundYields{50};
  bool background_;
  std::chrono::steady_clock::time_point idle_since_{};
  std::chrono::microseconds nap_{0};
  int spins_ = 0;
};

}  // namespace pycomm
