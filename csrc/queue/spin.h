// Yield-spinning before blocking on a condition variable. On an oversubscribed node (many ranks
// on few cores) a futex wake-up can cost milliseconds of scheduling latency, far more than a
// small collective; yielding keeps the core available to whoever has work.
#pragma once

#include <sched.h>

#include <chrono>
#include <thread>

namespace pycomm {

// PYCOMM_SPIN_US (fixed at first use): how long to yield-spin before blocking. 0 disables.
std::chrono::microseconds spin_budget();

// True once pred() holds; false when `budget` passed first.
template <typename Pred>
bool spin_until(Pred pred, std::chrono::microseconds budget = spin_budget()) {
  const auto end = std::chrono::steady_clock::now() + budget;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    sched_yield();
  }
  return true;
}

// Polling a transport: spin while progress is likely, then yield the core, then sleep. An irecv that
// waits minutes for its sender must not burn a core that ranks on an oversubscribed node share.
class Backoff {
 public:
  void progressed() { idle_since_ = std::chrono::steady_clock::now(); spins_ = 0; }
  void idle() {
    if (++spins_ < 256) return;
    if (std::chrono::steady_clock::now() - idle_since_ < std::chrono::seconds(1)) { sched_yield(); return; }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }

 private:
  std::chrono::steady_clock::time_point idle_since_ = std::chrono::steady_clock::now();
  int spins_ = 0;
};

}  // namespace pycomm
