// The stall inspector: a wait longer than PYCOMM_TIMEOUT seconds raises StallError naming the op,
// its sequence number and sizes, and breaks the communicator, instead of hanging the rank.
#pragma once

#include <string>

#include "diagnostics/health.h"

namespace pycomm {

constexpr double kDefaultStallTimeoutS = 300.0;

// PYCOMM_TIMEOUT in seconds (read at every call, so tests may change it); <= 0 disables the check.
// A malformed value raises std::invalid_argument naming the variable.
double stall_timeout_s();

// The StallError message for `waited` (op, sequence number, sizes, the ranks that have not reached it
// where the engine can tell (CommHealth::laggards, up to ~2 s), what else is in flight).
std::string stall_message(const OpInfo& waited, double timeout_s, const CommHealth& health);

// Marks `health` broken and throws StallError for `waited`, which did not complete in timeout_s.
[[noreturn]] void raise_stall(const OpInfo& waited, double timeout_s, CommHealth& health);

}  // namespace pycomm
