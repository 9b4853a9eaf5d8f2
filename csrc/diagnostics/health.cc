#include "diagnostics/health.h"

#include <cstdio>

#include "common/errors.h"

namespace pycomm {

bool CommHealth::broken() const {
  std::lock_guard<std::mutex> lk(mu_);
  return broken_;
}

std::string CommHealth::broken_reason() const {
  std::lock_guard<std::mutex> lk(mu_);
  return reason_;
}

void CommHealth::mark_broken(const std::string& reason) {
  std::lock_guard<std::mutex> lk(mu_);
  if (broken_) return;
  broken_ = true;
  reason_ = reason;
}

void CommHealth::check_usable(const char* what) const {
  std::lock_guard<std::mutex> lk(mu_);
  if (broken_)
    throw PycommError(std::string(what) + ": the " + label_ +
                      " is broken and accepts no more ops (ranks are out of step). Cause: " + reason_);
}

void CommHealth::note_abandoned() {
  std::lock_guard<std::mutex> lk(mu_);
  abandoned_ = true;
}

bool CommHealth::has_abandoned() const {
  std::lock_guard<std::mutex> lk(mu_);
  return abandoned_;
}

void CommHealth::note_started(const OpInfo& info, Clock::time_point since) {
  std::lock_guard<std::mutex> lk(mu_);
  auto at = in_flight_.end();  // ops start in seq order; the search only keeps the record sorted if one did not
  while (at != in_flight_.begin() && (at - 1)->info.seq > info.seq) --at;
  in_flight_.insert(at, InFlight{info, since});
}

void CommHealth::note_finished(uint64_t seq) {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto it = in_flight_.begin(); it != in_flight_.end(); ++it)
    if (it->info.seq == seq) {
      in_flight_.erase(it);
      return;
    }
}

std::string CommHealth::laggards(const OpInfo& waited) const {
  if (!peer_progress_ || !waited.collective || waited.collective_index < 0) return "";
  return peer_progress_->laggards(waited);
}

std::string CommHealth::in_flight_summary() const {
  std::lock_guard<std::mutex> lk(mu_);
  if (in_flight_.empty())
    return "no op of this communicator has started yet (it is still queued, or waiting for the other ranks to submit "
           "theirs)";
  const auto& [info, since] = in_flight_.front();
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f", std::chrono::duration<double>(Clock::now() - since).count());
  return "oldest op in flight: " + info.describe() + " for " + secs + " s (" + std::to_string(in_flight_.size()) +
         " in flight)";
}

}  // namespace pycomm
