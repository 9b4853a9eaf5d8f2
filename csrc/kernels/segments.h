// A multi-tensor kernel sees its tensors as segments of one flat bucket: tensor k occupies
// bucket elements [offset, offset + numel). Python computes the layout; kernels only walk it.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace pycomm {

struct Segment {
  void* ptr = nullptr;  // the tensor's data
  int64_t offset = 0;   // where it starts in the bucket, in bucket elements
  int64_t numel = 0;
};

// Builds segments from parallel lists (as they arrive from Python) and checks them.
inline std::vector<Segment> make_segments(const std::vector<uintptr_t>& ptrs, const std::vector<int64_t>& offsets,
                                          const std::vector<int64_t>& numels, int64_t bucket_numel, const char* what) {
  if (ptrs.size() != offsets.size() || ptrs.size() != numels.size())
    throw std::invalid_argument(std::string(what) + ": ptrs, offsets and numels must have the same length (got " +
                                std::to_string(ptrs.size()) + ", " + std::to_string(offsets.size()) + ", " +
                                std::to_string(numels.size()) + ")");
  std::vector<Segment> segs;
  segs.reserve(ptrs.size());
  for (size_t k = 0; k < ptrs.size(); ++k) {
    if (numels[k] < 0 || offsets[k] < 0 || offsets[k] + numels[k] > bucket_numel)
      throw std::invalid_argument(std::string(what) + ": tensor " + std::to_string(k) + " (offset " +
                                  std::to_string(offsets[k]) + ", numel " + std::to_string(numels[k]) +
                                  ") does not fit in a bucket of " + std::to_string(bucket_numel) + " elements");
    if (numels[k] > 0 && ptrs[k] == 0)
      throw std::invalid_argument(std::string(what) + ": tensor " + std::to_string(k) + " has a null data pointer");
    if (numels[k] > 0) segs.push_back(Segment{reinterpret_cast<void*>(ptrs[k]), offsets[k], numels[k]});
  }
  return segs;
}

}  // namespace pycomm
