// GPU side of the segment walk: tensors go to the kernel by value in batches (no device-side
// metadata allocation), each block takes one chunk of one segment (kChunk elements, kUnroll a thread).
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/gpu_compat.h"
#include "kernels/segments.h"

namespace pycomm::gpu {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;                      // elements per thread, all loaded before any is stored
constexpr int64_t kChunk = kThreads * kUnroll;  // elements per block
constexpr int kSegsPerLaunch = 48;              // keeps the argument struct well under 4 KiB

struct SegBatch {
  void* ptr[kSegsPerLaunch];
  int64_t offset[kSegsPerLaunch];
  int64_t numel[kSegsPerLaunch];
  int32_t block_start[kSegsPerLaunch + 1];
  int32_t n;
};

// For every element of every segment: v = op.load(tensor_ptr, bucket_index, tensor_index), then
// op.store(tensor_ptr, bucket_index, tensor_index, v). A thread loads its kUnroll elements before it
// stores any: the compiler must assume a store may alias a later load, so an element loop that stores as
// it goes waits out the memory's latency once per element (pack reached 13-43% of a copy that way).
template <typename Op>
__global__ void __launch_bounds__(kThreads) segment_kernel(SegBatch batch, Op op) {
  const int32_t b = static_cast<int32_t>(blockIdx.x);
  int s = 0;
  while (s + 1 < batch.n && batch.block_start[s + 1] <= b) ++s;
  void* const ptr = batch.ptr[s];
  const int64_t offset = batch.offset[s], numel = batch.numel[s];
  const int64_t first = static_cast<int64_t>(b - batch.block_start[s]) * kChunk + threadIdx.x;
  typename Op::Value v[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = first + u * kThreads;
    if (i < numel) v[u] = op.load(ptr, offset + i, i);
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = first + u * kThreads;
    if (i < numel) op.store(ptr, offset + i, i, v[u]);
  }
}

template <typename Op>
void launch_segments(const std::vector<Segment>& segs, gpuStream_t stream, Op op) {
  SegBatch batch;
  batch.n = 0;
  int32_t blocks = 0;
  auto flush = [&] {
    if (batch.n == 0) return;
    batch.block_start[batch.n] = blocks;
    segment_kernel<<<blocks, kThreads, 0, stream>>>(batch, op);
    PYCOMM_GPU_CHECK(gpuGetLastError());
    batch.n = 0;
    blocks = 0;
  };
  constexpr int64_t kMaxBlocks = int64_t(1) << 30;  // keeps block ids in int32
  for (const Segment& seg : segs) {
    const int64_t need = (seg.numel + kChunk - 1) / kChunk;
    if (need > kMaxBlocks)
      throw std::invalid_argument("a tensor of more than 2^30 * " + std::to_string(kChunk) +
                                  " elements is not supported");
    if (batch.n == kSegsPerLaunch || blocks + need > kMaxBlocks) flush();
    batch.ptr[batch.n] = seg.ptr;
    batch.offset[batch.n] = seg.offset;
    batch.numel[batch.n] = seg.numel;
    batch.block_start[batch.n] = blocks;
    batch.n++;
    blocks += static_cast<int32_t>(need);
  }
  flush();
}

}  // namespace pycomm::gpu
