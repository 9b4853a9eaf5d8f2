// The step lists (p2p_schedule.h) of pycomm's own reduce-scatter: rank r ends with the reduction of
// block r (`block` elements) of every rank's input, which stays untouched. The steps address three
// buffers: the input, a work buffer of the input's size (partial reductions) and the output. A block
// received for the first time lands straight in the work buffer (or the output) and the input's own
// block is reduced into it, so nothing is copied. Both move (size - 1) / size of the input per rank:
//   - recursive halving (power-of-two worlds): log2(size) steps, each handing over half of the
//     blocks still held;
//   - ring (other sizes): size - 1 steps, each passing one partly reduced block to the right.
#pragma once

#include <cstdint>
#include <vector>

#include "transport/mpi/p2p_schedule.h"

namespace pycomm::mpi {

constexpr int kScatterInput = 0, kScatterWork = 1, kScatterOutput = 2;  // P2pSchedule buffer indexes

std::vector<P2pStep> halving_reduce_scatter_steps(int64_t block, int rank, int size);  // size: a power of two
std::vector<P2pStep> ring_reduce_scatter_steps(int64_t block, int rank, int size);
std::vector<P2pStep> reduce_scatter_steps(int64_t block, int rank, int size);
// reduce_scatter_steps' choice by name (traces, NVTX): "recursive_halving", "ring" or "none".
const char* reduce_scatter_algorithm(int size);

}  // namespace pycomm::mpi
