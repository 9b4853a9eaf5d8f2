// The step lists (p2p_schedule.h) of pycomm's own all-gather, also the second half of its large
// broadcast (broadcast_schedules.h). Block v of the buffer, [bounds[v], bounds[v + 1]), starts on the
// rank whose position counted from `root` is v; every rank ends with every block. Both move
// (size - 1) / size of the buffer per rank:
//   - recursive doubling (power-of-two worlds): log2(size) steps, each swapping all blocks held so far;
//   - ring (other sizes): size - 1 steps, each passing one block to the right.
// Every rank must pass the same bounds: op matching establishes the sizes first.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/mpi/p2p_schedule.h"

namespace pycomm::mpi {

// `parts` + 1 block boundaries of `count` elements, the first count % parts blocks one longer.
std::vector<int64_t> even_bounds(int64_t count, int parts);

std::vector<P2pStep> doubling_allgather_steps(const std::vector<int64_t>& bounds, int rank, int size, int root);
std::vector<P2pStep> ring_allgather_steps(const std::vector<int64_t>& bounds, int rank, int size, int root);
// Recursive doubling on power-of-two worlds, else the ring.
std::vector<P2pStep> allgather_steps(const std::vector<int64_t>& bounds, int rank, int size, int root = 0);
// allgather_steps' choice by name (traces, NVTX): "recursive_doubling", "ring" or "none".
const char* allgather_algorithm(int size);

}  // namespace pycomm::mpi
