// The step lists (p2p_schedule.h) of pycomm's own broadcast, chosen the same way on every rank:
//   - binomial tree: each rank receives the whole buffer from its parent, then sends it to its
//     children, largest subtree first; log2(size) rounds, the best for small buffers, for 2 ranks
//     (where it is one message stream) and where ranks outnumber cores (CommHandles::oversubscribed:
//     each round waits for partners to get a core; 4 ranks on 2 cores beside 2 busy loops, 1-16 MiB:
//     0.40-0.49x mpi4py with scatter + all-gather's 4 rounds, 0.58-0.86x with the tree's 2);
//   - scatter + all-gather (van de Geijn), from kBroadcastScatterBytes on 3 or more ranks with cores
//     of their own: a binomial scatter of size blocks, then allgather_schedules.h's all-gather of
//     them; the root sends its buffer about once instead of log2(size) times.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/mpi/p2p_schedule.h"

namespace pycomm::mpi {

// Fixed: every rank must choose the same way. MPICH switches near 12 KiB for latency; here the
// scatter pays once every rank's block is at least a few pipelined messages.
constexpr int64_t kBroadcastScatterBytes = int64_t{512} << 10;

// Ranges in bytes of the buffer (broadcast moves bytes whatever the dtype).
std::vector<P2pStep> binomial_broadcast_steps(int64_t bytes, int rank, int size, int root);
std::vector<P2pStep> scatter_allgather_broadcast_steps(int64_t bytes, int rank, int size, int root);
std::vector<P2pStep> broadcast_steps(int64_t bytes, int rank, int size, int root, bool oversubscribed);
// broadcast_steps' choice by name (traces, NVTX): "binomial_tree", "scatter_allgather" or "none".
const char* broadcast_algorithm(int64_t bytes, int size, bool oversubscribed);

}  // namespace pycomm::mpi
