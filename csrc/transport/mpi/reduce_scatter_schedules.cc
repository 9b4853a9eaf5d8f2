#include "transport/mpi/reduce_scatter_schedules.h"

#include "transport/mpi/pow2_fold.h"

namespace pycomm::mpi {
namespace {

// One halving exchange with `peer`: send blocks [send_lo, send_hi), receive blocks [recv_lo, recv_hi).
// `first`: this rank's own part of the received blocks is still only in the input; `last`: the
// received range is this rank's block, which goes to the output.
P2pStep exchange(int peer, int64_t block, int send_lo, int send_hi, int recv_lo, int recv_hi, bool first, bool last) {
  P2pStep s{peer, send_lo * block, (send_hi - send_lo) * block, peer, recv_lo * block, (recv_hi - recv_lo) * block,
            false};
  s.send_buf = first ? kScatterInput : kScatterWork;
  if (first || last) {  // received straight into place, my partial reduction added to it
    s.recv_buf = last ? kScatterOutput : kScatterWork;
    if (last) s.recv_begin = 0;
    s.combine_buf = first ? kScatterInput : kScatterWork;
    s.combine_begin = recv_lo * block;
  } else {  // the work buffer already holds my partial reduction there: through scratch
    s.recv_buf = kScatterWork;
    s.reduce = true;
  }
  return s;
}

}  // namespace

std::vector<P2pStep> halving_reduce_scatter_steps(int64_t block, int rank, int size) {
  std::vector<P2pStep> steps;
  int lo = 0, hi = size;  // the blocks this rank still reduces
  for (int mask = size / 2; mask >= 1; mask /= 2) {
    const int peer = rank ^ mask, mid = lo + (hi - lo) / 2;
    const bool first = mask == size / 2, last = mask == 1;
    if (rank & mask) {  // keep the upper half
      steps.push_back(exchange(peer, block, lo, mid, mid, hi, first, last));
      lo = mid;
    } else {
      steps.push_back(exchange(peer, block, mid, hi, lo, mid, first, last));
      hi = mid;
    }
  }
  return steps;
}

std::vector<P2pStep> ring_reduce_scatter_steps(int64_t block, int rank, int size) {
  std::vector<P2pStep> steps;
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  for (int s = 0; s < size - 1; ++s) {
    // Block rank - s - 1 goes right; block rank - s - 2 comes from the left (rank's own block last),
    // each received once, straight into place, and reduced with my input's block.
    const int send = (rank - s - 1 + 2 * size) % size, recv = (rank - s - 2 + 2 * size) % size;
    const bool last = s == size - 2;
    P2pStep st{right, send * block, block, left, last ? 0 : recv * block, block, false};
    st.send_buf = s == 0 ? kScatterInput : kScatterWork;
    st.recv_buf = last ? kScatterOutput : kScatterWork;
    st.combine_buf = kScatterInput;
    st.combine_begin = recv * block;
    steps.push_back(st);
  }
  return steps;
}

const char* reduce_scatter_algorithm(int size) {
  if (size == 1) return kNoSchedule;
  return Pow2Fold(0, size).power_of_two() ? kRecursiveHalving : kRing;
}

std::vector<P2pStep> reduce_scatter_steps(int64_t block, int rank, int size) {
  const char* algorithm = reduce_scatter_algorithm(size);
  if (algorithm == kRecursiveHalving) return halving_reduce_scatter_steps(block, rank, size);
  if (algorithm == kRing) return ring_reduce_scatter_steps(block, rank, size);
  return {};
}

}  // namespace pycomm::mpi
