// Per-op counters over the whole process (all communicators): calls, bytes, seconds and bus bytes
// (bytes * the nccl-tests bus factor, so busbw = bus_bytes / seconds). Read by pycomm.stats().
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace pycomm {

struct OpCounters {
  int64_t calls = 0;
  int64_t bytes = 0;
  double bus_bytes = 0;
  double seconds = 0;        // from the op's start on its queue to its completion
  int64_t inline_calls = 0;  // of `calls`, those run on the caller's thread (queue/inline_run)
};

void stats_record(const std::string& op, int64_t bytes, double bus_bytes, double seconds,
                  bool on_caller_thread = false);
std::map<std::string, OpCounters> stats_snapshot();
void stats_reset();

}  // namespace pycomm
