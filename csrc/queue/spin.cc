#include "queue/spin.h"

#include <cstdlib>

namespace pycomm {

std::chrono::microseconds spin_budget() {
  static const std::chrono::microseconds budget = [] {
    const char* v = std::getenv("PYCOMM_SPIN_US");
    long us = v != nullptr && *v != '\0' ? std::strtol(v, nullptr, 10) : 250;
    return std::chrono::microseconds(us < 0 ? 0 : us);
  }();
  return budget;
}

}  // namespace pycomm
