#include "transport/mpi/allreduce_schedules.h"

#include <algorithm>
#include <utility>

#include "transport/mpi/pow2_fold.h"

namespace pycomm::mpi {
namespace {

// Segment i of `count` elements split over `size` ranks, the first count % size one element longer.
int64_t seg_begin(int64_t count, int size, int i) { return i * (count / size) + std::min<int64_t>(i, count % size); }

P2pStep exchange(int peer, int64_t send_begin, int64_t send_end, int64_t recv_begin, int64_t recv_end, bool reduce) {
  return {peer, send_begin, send_end - send_begin, peer, recv_begin, recv_end - recv_begin, reduce};
}

}  // namespace

std::vector<P2pStep> rabenseifner_steps(int64_t count, int rank, int size) {
  std::vector<P2pStep> steps;
  std::vector<std::pair<int64_t, int64_t>> ranges;  // [lo, hi) before each halving
  int64_t lo = 0, hi = count;
  for (int mask = size / 2; mask >= 1; mask /= 2) {
    const int peer = rank ^ mask;
    const int64_t mid = lo + (hi - lo) / 2;
    ranges.emplace_back(lo, hi);
    if (rank < peer) {  // keep the lower half, hand over the upper one
      steps.push_back(exchange(peer, mid, hi, lo, mid, true));
      hi = mid;
    } else {
      steps.push_back(exchange(peer, lo, mid, mid, hi, true));
      lo = mid;
    }
  }
  // All-gather: undo the halvings in reverse, swapping the finished halves.
  for (int mask = 1; mask < size; mask *= 2) {
    const int peer = rank ^ mask;
    const auto [plo, phi] = ranges.back();
    ranges.pop_back();
    steps.push_back(rank < peer ? exchange(peer, lo, hi, hi, phi, false) : exchange(peer, lo, hi, plo, lo, false));
    lo = plo;
    hi = phi;
  }
  return steps;
}

std::vector<P2pStep> ring_steps(int64_t count, int rank, int size) {
  std::vector<P2pStep> steps;
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  auto seg = [&](int i) { return std::make_pair(seg_begin(count, size, i), seg_begin(count, size, i + 1)); };
  auto step = [&](int send, int recv, bool reduce) {
    const auto [sb, se] = seg(send);
    const auto [rb, re] = seg(recv);
    steps.push_back({right, sb, se - sb, left, rb, re - rb, reduce});
  };
  // Reduce-scatter: after size - 1 steps this rank holds the full reduction of segment rank + 1.
  for (int s = 0; s < size - 1; ++s) step((rank - s + size) % size, (rank - s - 1 + size) % size, true);
  // All-gather: pass the reduced segments around the ring, straight into place.
  for (int s = 0; s < size - 1; ++s) step((rank + 1 - s + size) % size, (rank - s + size) % size, false);
  return steps;
}

const char* allreduce_algorithm(int size) {
  if (size == 1) return kNoSchedule;
  return Pow2Fold(0, size).power_of_two() ? kRabenseifner : kRing;
}

std::vector<P2pStep> allreduce_steps(int64_t count, int rank, int size) {
  const char* algorithm = allreduce_algorithm(size);
  if (algorithm == kRabenseifner) return rabenseifner_steps(count, rank, size);
  if (algorithm == kRing) return ring_steps(count, rank, size);
  return {};
}

}  // namespace pycomm::mpi
