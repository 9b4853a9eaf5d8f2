// Receive buffers kept across all-reduces of one communicator. Why keep them: Open MPI 4.1's tuned
// all-reduce mallocs a message-sized temporary on every call; above glibc's largest mmap threshold
// (32 MiB) each call then maps fresh pages, faults every one of them in and unmaps them again, which
// made 64 MiB all-reduces 2-3x slower than gloo (which keeps its buffers) on a single node.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace pycomm::mpi {

class ScratchPool {
 public:
  using Block = std::unique_ptr<std::vector<char>>;
  // A block of at least `bytes` (the largest kept one, grown if need be). Any thread.
  Block take(size_t bytes) {
    Block b;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!free_.empty()) {
        b = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (!b) b = std::make_unique<std::vector<char>>();
    if (b->size() < bytes) b->resize(bytes);
    return b;
  }
  // Keeps the block for the next op (at most kKept: several ops may be in flight at once).
  void give_back(Block b) {
    std::lock_guard<std::mutex> lk(mu_);
    if (free_.size() < kKept) free_.push_back(std::move(b));
  }

 private:
  static constexpr size_t kKept = 2;
  std::mutex mu_;
  std::vector<Block> free_;
};

}  // namespace pycomm::mpi
