#include "diagnostics/stall.h"

#include <atomic>
#include <cstdio>

#include "common/errors.h"
#include "common/settings.h"

namespace pycomm {

double stall_timeout_s() { return timeout_setting_s(); }

std::string stall_message(const OpInfo& waited, double timeout_s, const CommHealth& health) {
  char secs[32];
  std::snprintf(secs, sizeof secs, "%g", timeout_s);
  std::string laggards = health.laggards(waited);
  return waited.describe() + " on the " + health.label() + " did not complete within PYCOMM_TIMEOUT=" + secs + " s; " +
         (laggards.empty() ? "" : laggards + "; ") + health.in_flight_summary() +
         ". Another rank probably skipped, reordered or has not reached this op, or died. "
         "The communicator is now broken.";
}

namespace {
std::atomic<StallHook> g_stall_hook{nullptr};
}

void set_stall_hook(StallHook hook) { g_stall_hook.store(hook); }

std::string stall_hook_suffix(const std::string& message, const CommHealth& health) {
  StallHook hook = g_stall_hook.load();
  return hook ? hook(message, health.trace_comm().id) : "";
}

void raise_stall(const OpInfo& waited, double timeout_s, CommHealth& health) {
  std::string msg = stall_message(waited, timeout_s, health);
  health.mark_broken("stall: " + msg);
  msg += stall_hook_suffix(msg, health);
  throw StallError(msg);
}

}  // namespace pycomm
