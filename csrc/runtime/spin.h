// Yield-spinning before blocking on a condition variable. On an oversubscribed node (many ranks
// on few cores) a futex wake-up can cost milliseconds of scheduling latency, far more than a
// small collective; yielding keeps the core available to whoever has work.
#pragma once

#include <sched.h>

#include <chrono>

namespace pycomm {

// PYCOMM_SPIN_US (read once; default 250): how long to yield-spin before blocking. 0 disables.
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

}  // namespace pycomm
