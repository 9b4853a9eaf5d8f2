// Reductions across one thread block through shared memory (portable to CUDA's 32-wide warps and
// AMD's 64-wide wavefronts alike). Every thread gets the result; the block must be kThreads wide.
#pragma once

#include "common/gpu_compat.h"
#include "kernels/gpu/segments.cuh"

namespace pycomm::gpu {

// op(a, b) must be associative and commutative. `scratch` holds kThreads floats; it may be reused
// by the caller right after this returns.
template <typename Op>
__device__ float block_reduce(float v, float* scratch, Op op) {
  const int t = static_cast<int>(threadIdx.x);
  scratch[t] = v;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (t < half) scratch[t] = op(scratch[t], scratch[t + half]);
    __syncthreads();
  }
  const float r = scratch[0];
  __syncthreads();
  return r;
}

struct MaxOp { __device__ float operator()(float a, float b) const { return a > b ? a : b; } };
struct SumOp { __device__ float operator()(float a, float b) const { return a + b; } };

// Grid size for a grid-stride loop over `items` work items (one item per thread block).
inline unsigned grid_for(int64_t items) {
  constexpr int64_t kMaxGrid = int64_t(1) << 20;
  return static_cast<unsigned>(items < kMaxGrid ? (items > 0 ? items : 1) : kMaxGrid);
}

}  // namespace pycomm::gpu
