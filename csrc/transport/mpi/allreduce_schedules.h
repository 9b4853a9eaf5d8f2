// The step lists (p2p_schedule.h) of pycomm's own all-reduce for messages too large to travel with
// op matching (signature_exchange.h). Both move 2 (size - 1) / size of the buffer per rank:
//   - Rabenseifner (power-of-two worlds): reduce-scatter by recursive halving, then all-gather by
//     recursive doubling: 2 log2(size) steps;
//   - ring (other sizes, where Rabenseifner's fold would send the whole buffer twice more):
//     reduce-scatter then all-gather around the ring, 2 (size - 1) steps.
// Every element's sum is computed by one rank and copied to the others, so all ranks end with the
// same bits. Every rank must pass the same count: MpiOp's op matching establishes it first.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/mpi/p2p_schedule.h"

namespace pycomm::mpi {

std::vector<P2pStep> rabenseifner_steps(int64_t count, int rank, int size);  // size: a power of two
std::vector<P2pStep> ring_steps(int64_t count, int rank, int size);
// The schedule for `count` elements on `size` ranks, and its name (traces, NVTX): "rabenseifner",
// "ring", or "none" on one rank.
std::vector<P2pStep> allreduce_steps(int64_t count, int rank, int size);
const char* allreduce_algorithm(int size);

}  // namespace pycomm::mpi
