#include "common/settings.h"

#include <atomic>
#include <mutex>
#include <optional>
#include <stdexcept>

namespace pycomm {
namespace {

std::mutex mu;  // Python may re-apply while progress threads read (a copy under the lock: no torn reads)
std::optional<Settings> current;
std::atomic<bool> nvtx_tool{false};
std::atomic<double> timeout_s{0};
std::atomic<bool> applied{false};

}  // namespace

Settings settings() {
  std::lock_guard<std::mutex> lk(mu);
  if (!current)
    throw std::logic_error(
        "pycomm's settings were read before pycomm.settings applied them: load the core "
        "through pycomm._build.core(), not by importing pycomm._C directly");
  return *current;
}

void apply_settings(const Settings& values) {
  std::lock_guard<std::mutex> lk(mu);
  current = values;
  nvtx_tool.store(values.nvtx_tool, std::memory_order_relaxed);
  timeout_s.store(values.timeout_s, std::memory_order_relaxed);
  applied.store(true, std::memory_order_release);
}

bool nvtx_tool_attached() { return nvtx_tool.load(std::memory_order_relaxed); }

double timeout_setting_s() {
  if (!applied.load(std::memory_order_acquire)) settings();  // throws before the first apply, as settings() does
  return timeout_s.load(std::memory_order_relaxed);
}

}  // namespace pycomm
