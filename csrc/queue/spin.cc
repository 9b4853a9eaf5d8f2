#include "queue/spin.h"

#include <atomic>

#include "common/settings.h"

namespace pycomm {

std::chrono::microseconds spin_budget() {
  static const std::chrono::microseconds budget(settings().spin_us);
  return budget;
}

namespace {
std::atomic<bool> g_oversubscribed{false};
}  // namespace

void note_node_oversubscribed(bool oversubscribed) {
  if (oversubscribed) g_oversubscribed.store(true, std::memory_order_relaxed);
}

bool node_oversubscribed() { return g_oversubscribed.load(std::memory_order_relaxed); }

}  // namespace pycomm
