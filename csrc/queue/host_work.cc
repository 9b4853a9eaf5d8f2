#include "queue/host_work.h"

#include <chrono>

#include "diagnostics/nvtx.h"
#include "diagnostics/stall.h"
#include "queue/spin.h"

namespace pycomm {

bool HostWork::is_completed() {
  std::lock_guard<std::mutex> lk(mu_);
  return done_;
}

void HostWork::wait(uintptr_t, double timeout_s) {
  NvtxScope range("wait ", info_);
  spin_until([&] { return done_flag_.load(std::memory_order_acquire); });
  std::unique_lock<std::mutex> lk(mu_);
  if (!done_) {  // (done: wait_for would still read the clock before looking at its predicate)
    if (timeout_s > 0) {
      if (!cv_.wait_for(lk, std::chrono::duration<double>(timeout_s), [&] { return done_; })) {
        lk.unlock();
        raise_stall(info_, timeout_s, *health_);
      }
    } else {
      cv_.wait(lk, [&] { return done_; });
    }
  }
  if (error_) std::rethrow_exception(error_);
}

std::shared_ptr<const P2pMessage> HostWork::received() {
  std::lock_guard<std::mutex> lk(mu_);
  return done_ && !error_ ? received_ : nullptr;
}

void HostWork::complete() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    done_ = true;
    done_flag_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

void HostWork::fail(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    done_ = true;
    error_ = std::move(error);
    done_flag_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

}  // namespace pycomm
