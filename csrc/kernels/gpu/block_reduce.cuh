// Codec kernels whose lane groups of 32 threads (a CUDA warp, half an AMD wavefront) take whole codec
// blocks, reductions across a group by shuffles, and their launch.
#pragma once

#include "common/gpu_compat.h"
#include "kernels/gpu/segments.cuh"

namespace pycomm::gpu {

struct MaxOp {
  __device__ float operator()(float a, float b) const { return a > b ? a : b; }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// A reduction across a group of kLanes threads through xor shuffles (no barrier); every lane gets the same
// result. For lane 0 the steps add lane t + 16, then t + 8, ..., t + 1, as the last five steps of a
// shared-memory tree over the group do, so even a float sum comes out in that tree's order.
constexpr int kLanes = 32;                  // a CUDA warp; half an AMD wavefront
constexpr int kGroups = kThreads / kLanes;  // lane groups per thread block
template <typename Op>
__device__ float group_reduce(float v, Op op) {
  for (int mask = kLanes / 2; mask > 0; mask /= 2) v = op(v, gpuShflXor(v, mask));
  return v;
}

// fn(blk, b0, len, lane) for each codec block (`block` elements from b0, the last `len` may be short) that
// falls to this thread's lane group: groups take whole blocks in a grid-stride loop, so a block's scale is
// read once and no element needs a division to find its block (a 64-bit division per element cost
// dequantize more than its memory traffic). Uniform across a group: group_reduce may be called in fn.
template <typename Fn>
__device__ void for_each_codec_block(int64_t numel, int64_t block, Fn fn) {
  const int lane = static_cast<int>(threadIdx.x) % kLanes;
  const int64_t groups = static_cast<int64_t>(gridDim.x) * kGroups;
  const int64_t nblocks = (numel + block - 1) / block;
  for (int64_t blk = static_cast<int64_t>(blockIdx.x) * kGroups + threadIdx.x / kLanes; blk < nblocks; blk += groups) {
    const int64_t b0 = blk * block;
    fn(blk, b0, block < numel - b0 ? block : numel - b0, lane);
  }
}
// Thread blocks for for_each_codec_block over `nblocks` codec blocks (one per lane group).
inline int64_t thread_blocks_for_codec_blocks(int64_t nblocks) { return (nblocks + kGroups - 1) / kGroups; }

// Grid size for a grid-stride loop over `items` work items (one item per thread block).
inline unsigned grid_for(int64_t items) {
  constexpr int64_t kMaxGrid = int64_t(1) << 20;
  return static_cast<unsigned>(items < kMaxGrid ? (items > 0 ? items : 1) : kMaxGrid);
}

// The prologue and epilogue of every single-buffer kernel launch: make `device` current, call
// launch(grid, stream) with a grid for `items` thread blocks, and surface a launch error.
template <typename Launch>
void launch_on(int device, uintptr_t stream, int64_t items, Launch launch) {
  DeviceGuard guard(device);
  launch(grid_for(items), reinterpret_cast<gpuStream_t>(stream));
  PYCOMM_GPU_CHECK(gpuGetLastError());
}

// launch_on for a kernel that runs for_each_codec_block over `nblocks` codec blocks: one lane group per
// codec block; no launch when there are none (an empty tensor).
template <typename Launch>
void launch_over_codec_blocks(int device, uintptr_t stream, int64_t nblocks, Launch launch) {
  if (nblocks == 0) return;
  launch_on(device, stream, thread_blocks_for_codec_blocks(nblocks), launch);
}

}  // namespace pycomm::gpu
