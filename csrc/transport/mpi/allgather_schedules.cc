#include "transport/mpi/allgather_schedules.h"

#include <algorithm>

#include "transport/mpi/pow2_fold.h"

namespace pycomm::mpi {
namespace {

int relative(int rank, int size, int root) { return (rank - root + size) % size; }
int real(int vrank, int size, int root) { return (vrank + root) % size; }

}  // namespace

std::vector<int64_t> even_bounds(int64_t count, int parts) {
  std::vector<int64_t> b(static_cast<size_t>(parts) + 1);
  for (int i = 0; i <= parts; ++i)
    b[static_cast<size_t>(i)] = i * (count / parts) + std::min<int64_t>(i, count % parts);
  return b;
}

std::vector<P2pStep> doubling_allgather_steps(const std::vector<int64_t>& bounds, int rank, int size, int root) {
  std::vector<P2pStep> steps;
  const int vr = relative(rank, size, root);
  for (int mask = 1; mask < size; mask <<= 1) {
    const int vpeer = vr ^ mask;
    const int lo = vr / mask * mask, plo = vpeer / mask * mask;  // the blocks each side holds so far
    const int peer = real(vpeer, size, root);
    steps.push_back(
        {peer, bounds[lo], bounds[lo + mask] - bounds[lo], peer, bounds[plo], bounds[plo + mask] - bounds[plo], false});
  }
  return steps;
}

std::vector<P2pStep> ring_allgather_steps(const std::vector<int64_t>& bounds, int rank, int size, int root) {
  std::vector<P2pStep> steps;
  const int vr = relative(rank, size, root);
  const int right = real((vr + 1) % size, size, root), left = real((vr + size - 1) % size, size, root);
  for (int s = 0; s < size - 1; ++s) {
    const int send = (vr - s + size) % size, recv = (vr - s - 1 + size) % size;
    steps.push_back({right, bounds[send], bounds[send + 1] - bounds[send], left, bounds[recv],
                     bounds[recv + 1] - bounds[recv], false});
  }
  return steps;
}

const char* allgather_algorithm(int size) {
  if (size == 1) return kNoSchedule;
  return Pow2Fold(0, size).power_of_two() ? kRecursiveDoubling : kRing;
}

std::vector<P2pStep> allgather_steps(const std::vector<int64_t>& bounds, int rank, int size, int root) {
  const char* algorithm = allgather_algorithm(size);
  if (algorithm == kRecursiveDoubling) return doubling_allgather_steps(bounds, rank, size, root);
  if (algorithm == kRing) return ring_allgather_steps(bounds, rank, size, root);
  return {};
}

}  // namespace pycomm::mpi
