#include "queue/spin.h"

#include <atomic>

#include "common/settings.h"

namespace pycomm {

std::chrono::microseconds spin_budget() {
  static const std::chrono::microseconds budget(settings().spin_us);
  return budget;
}

namespace {
std::atomic<int> g_ranks_on_node{1};
}  // namespace

void note_ranks_on_node(int ranks) {
  int seen = g_ranks_on_node.load();
  while (ranks > seen && !g_ranks_on_node.compare_exchange_weak(seen, ranks)) {
  }
}

bool node_oversubscribed() {
  static const int cores = [] {
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  }();
  return g_ranks_on_node.load(std::memory_order_relaxed) > cores;
}

}  // namespace pycomm
