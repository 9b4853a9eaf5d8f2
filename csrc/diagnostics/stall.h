// The stall inspector: a wait longer than PYCOMM_TIMEOUT seconds raises StallError naming the op,
// its sequence number and sizes, and breaks the communicator, instead of hanging the rank.
#pragma once

#include <cstdint>
#include <string>

#include "diagnostics/health.h"

namespace pycomm {

// PYCOMM_TIMEOUT in seconds (as pycomm/settings.py last applied it); 0 disables the check.
double stall_timeout_s();

// The StallError message for `waited` (op, sequence number, sizes, the ranks that have not reached it
// where the engine can tell (CommHealth::laggards, up to ~2 s), what else is in flight).
std::string stall_message(const OpInfo& waited, double timeout_s, const CommHealth& health);

// Marks `health` broken and throws StallError for `waited`, which did not complete in timeout_s.
[[noreturn]] void raise_stall(const OpInfo& waited, double timeout_s, CommHealth& health);

// Called with the stall message before StallError is thrown (the flight recorder, pycomm/tracing/flight_recorder.py,
// dumps the ranks' last trace events); what it returns is appended to the message ("" adds nothing).
// It must not throw. Set once by the bindings; empty: none.
using StallHook = std::string (*)(const std::string& message, uint32_t comm_id);
void set_stall_hook(StallHook hook);
// What the hook appends to stall `message` on `health`'s communicator ("" without a hook): for engines
// that raise their StallError themselves (NCCL's abort_for_stall).
std::string stall_hook_suffix(const std::string& message, const CommHealth& health);

}  // namespace pycomm
