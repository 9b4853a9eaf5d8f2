// Marks the ops a thread submits inside the scope as ones it waits for at once (async_op=False).
// A host transport may then run such an op on the calling thread instead of handing it to its
// progress thread: on an oversubscribed node that hand-off (a wake-up and a thread switch each
// way) costs more than a small collective. Thread-local, so concurrent submitters never see it.
#pragma once

namespace pycomm {

class CallerWaitsScope {
 public:
  explicit CallerWaitsScope(bool caller_waits) : previous_(active_) { active_ = caller_waits; }
  ~CallerWaitsScope() { active_ = previous_; }
  CallerWaitsScope(const CallerWaitsScope&) = delete;
  CallerWaitsScope& operator=(const CallerWaitsScope&) = delete;

  static bool active() { return active_; }

 private:
  static inline thread_local bool active_ = false;
  bool previous_;
};

}  // namespace pycomm
