#include "diagnostics/stats.h"

#include <mutex>

namespace pycomm {
namespace {
std::mutex g_mu;
std::map<std::string, OpCounters> g_counters;
}  // namespace

void stats_record(const std::string& op, int64_t bytes, double bus_bytes, double seconds, bool on_caller_thread) {
  std::lock_guard<std::mutex> lk(g_mu);
  OpCounters& c = g_counters[op];
  c.calls += 1;
  c.bytes += bytes;
  c.bus_bytes += bus_bytes;
  c.seconds += seconds;
  c.inline_calls += on_caller_thread ? 1 : 0;
}

std::map<std::string, OpCounters> stats_snapshot() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_counters;
}

void stats_reset() {
  std::lock_guard<std::mutex> lk(g_mu);
  g_counters.clear();
}

}  // namespace pycomm
