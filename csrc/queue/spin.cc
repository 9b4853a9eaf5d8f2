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

namespace {
std::atomic<int> g_ranks_on_node{1};

// Runnable threads on the machine (/proc/loadavg's "running"), read at most every 10 ms: -1 while a
// fresh read is not due (the caller keeps what it decided last).
long runnable_if_due(std::atomic<int64_t>& next_read_ns) {
  const int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  int64_t due = next_read_ns.load(std::memory_order_relaxed);
  if (now < due || !next_read_ns.compare_exchange_strong(due, now + 10'000'000)) return -1;
  long running = 0;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {  // "1m 5m 15m running/total last_pid"
    if (std::fscanf(f, "%*f %*f %*f %ld/", &running) != 1) running = 0;
    std::fclose(f);
  }
  return running;
}

long online_cpus() {
  static const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return cpus;
}
}  // namespace

bool machine_crowded() {
  static std::atomic<int64_t> next_read_ns{0};
  static std::atomic<bool> crowded{false};
  const long running = runnable_if_due(next_read_ns);
  if (running < 0) return crowded.load();
  const bool now_crowded = online_cpus() > 0 && running > online_cpus();
  crowded.store(now_crowded);
  return now_crowded;  // what this call read, whatever another thread stores meanwhile
}

void note_ranks_on_node(int ranks) {
  if (ranks > 0) g_ranks_on_node.store(ranks, std::memory_order_relaxed);
}

bool cores_contended() {
  static std::atomic<int64_t> next_read_ns{0};
  static std::atomic<bool> contended{false};
  const long running = runnable_if_due(next_read_ns);
  if (running < 0) return contended.load(std::memory_order_relaxed);
  const long ours = 2L * g_ranks_on_node.load(std::memory_order_relaxed);  // compute + progress thread each
  const bool now_contended = online_cpus() > 0 && running > std::max(online_cpus(), ours);
  contended.store(now_contended, std::memory_order_relaxed);
  return now_contended;
}

}  // namespace pycomm
