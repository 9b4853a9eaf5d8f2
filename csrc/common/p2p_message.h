// What a point-to-point receive or probe learns about a message from its header: the sender, the
// tag, the element type and shape. A receive of unknown shape (Transport::recv_new) also owns the
// host memory the payload landed in, handed to Python without a copy.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "common/dtype.h"

namespace pycomm {

constexpr int kAnySource = -1;  // receive from whichever rank's message is matched first
constexpr int kAnyTag = -1;     // probe only: a message of any tag
constexpr int kMaxP2pDims = 8;  // dimensions a shape-carrying send can describe in its header

// 64-byte aligned host memory (every dtype's alignment; frees itself).
class HostBytes {
 public:
  explicit HostBytes(int64_t bytes)
      : bytes_(bytes),
        ptr_(static_cast<char*>(std::aligned_alloc(64, static_cast<size_t>((bytes + 63) / 64 * 64 + 64)))) {
    if (!ptr_) throw std::bad_alloc();
  }
  ~HostBytes() { std::free(ptr_); }
  HostBytes(const HostBytes&) = delete;
  HostBytes& operator=(const HostBytes&) = delete;
  char* data() const { return ptr_; }
  int64_t size() const { return bytes_; }

 private:
  int64_t bytes_;
  char* ptr_;
};

struct P2pMessage {
  int source = -1;
  int tag = -1;
  DType dtype = DType::U8;
  int64_t count = 0;                // elements
  int ndim = -1;                    // -1: sent by plain send (no shape; received as 1-d of `count`)
  std::vector<int64_t> shape;       // ndim entries when ndim >= 0
  std::shared_ptr<HostBytes> data;  // recv_new only: the payload
};

}  // namespace pycomm
