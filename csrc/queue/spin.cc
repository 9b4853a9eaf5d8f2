#include "queue/spin.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>

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

bool machine_crowded() {
  static const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  static std::atomic<int64_t> next_read_ns{0};
  static std::atomic<bool> crowded{false};
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch()).count();
  int64_t due = next_read_ns.load(std::memory_order_relaxed);
  if (now < due || !next_read_ns.compare_exchange_strong(due, now + 10'000'000)) return crowded.load();
  long running = 0;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {  // "1m 5m 15m running/total last_pid"
    if (std::fscanf(f, "%*f %*f %*f %ld/", &running) != 1) running = 0;
    std::fclose(f);
  }
  const bool now_crowded = cpus > 0 && running > cpus;
  crowded.store(now_crowded);
  return now_crowded;   // what this call read, whatever another thread stores meanwhile
}

}  // namespace pycomm
