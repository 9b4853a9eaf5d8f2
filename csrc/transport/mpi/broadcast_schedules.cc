#include "transport/mpi/broadcast_schedules.h"

#include <algorithm>

#include "transport/mpi/allgather_schedules.h"

namespace pycomm::mpi {
namespace {

int real(int vrank, int size, int root) { return (vrank + root) % size; }

}  // namespace

std::vector<P2pStep> binomial_broadcast_steps(int64_t bytes, int rank, int size, int root) {
  std::vector<P2pStep> steps;
  const int vr = (rank - root + size) % size;
  int mask = 1;
  for (; mask < size; mask <<= 1)
    if (vr & mask) {  // the parent clears the lowest set bit
      steps.push_back({-1, 0, 0, real(vr - mask, size, root), 0, bytes, false});
      break;
    }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (vr + mask < size) steps.push_back({real(vr + mask, size, root), 0, bytes, -1, 0, 0, false});
  return steps;
}

std::vector<P2pStep> scatter_allgather_broadcast_steps(int64_t bytes, int rank, int size, int root) {
  const std::vector<int64_t> b = even_bounds(bytes, size);
  auto end = [&](int v) { return b[static_cast<size_t>(std::min(v, size))]; };
  std::vector<P2pStep> steps;
  // Binomial scatter (MPICH's): virtual rank vr receives blocks [vr, vr + mask) from its parent and
  // hands the upper parts of them on to its children.
  const int vr = (rank - root + size) % size;
  int mask = 1;
  for (; mask < size; mask <<= 1)
    if (vr & mask) {
      steps.push_back({-1, 0, 0, real(vr - mask, size, root), b[vr], end(vr + mask) - b[vr], false});
      break;
    }
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (vr + mask < size) {
      const int child = vr + mask;
      steps.push_back({real(child, size, root), b[child], end(child + mask) - b[child], -1, 0, 0, false});
    }
  const std::vector<P2pStep> gather = allgather_steps(b, rank, size, root);
  steps.insert(steps.end(), gather.begin(), gather.end());
  return steps;
}

const char* broadcast_algorithm(int64_t bytes, int size, bool oversubscribed) {
  if (size == 1) return kNoSchedule;
  if (size == 2 || oversubscribed || bytes < kBroadcastScatterBytes) return kBinomialTree;
  return kScatterAllgather;
}

std::vector<P2pStep> broadcast_steps(int64_t bytes, int rank, int size, int root, bool oversubscribed) {
  const char* algorithm = broadcast_algorithm(bytes, size, oversubscribed);
  if (algorithm == kBinomialTree) return binomial_broadcast_steps(bytes, rank, size, root);
  if (algorithm == kScatterAllgather) return scatter_allgather_broadcast_steps(bytes, rank, size, root);
  return {};
}

}  // namespace pycomm::mpi
