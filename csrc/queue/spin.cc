#include "queue/spin.h"

#include "common/settings.h"

namespace pycomm {

std::chrono::microseconds spin_budget() {
  static const std::chrono::microseconds budget(settings().spin_us);
  return budget;
}

}  // namespace pycomm
