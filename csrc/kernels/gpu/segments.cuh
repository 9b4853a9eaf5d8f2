// GPU side of the segment walk: tensors go to the kernel by value in batches (no device-side
// metadata allocation), each block takes one chunk of one segment.
#pragma once

#include <algorithm>
#include <stdexcept>
#include <cstdint>
#include <vector>

#include "common/gpu_compat.h"
#include "kernels/segments.h"

namespace pycomm::gpu {

constexpr int kThreads = 256;
constexpr int64_t kChunk = kThreads * 16;   // elements per block
constexpr int kSegsPerLaunch = 48;          // keeps the argument struct well under 4 KiB

struct SegBatch {
  void* ptr[kSegsPerLaunch];
  int64_t offset[kSegsPerLaunch];
  int64_t numel[kSegsPerLaunch];
  int32_t block_start[kSegsPerLaunch + 1];
  int32_t n;
};

// op(tensor_ptr, bucket_index, tensor_index) for every element of every segment.
template <typename Op>
__global__ void __launch_bounds__(kThreads) segment_kernel(SegBatch batch, Op op) {
  const int32_t b = static_cast<int32_t>(blockIdx.x);
  int s = 0;
  while (s + 1 < batch.n && batch.block_start[s + 1] <= b) ++s;
  const int64_t begin = static_cast<int64_t>(b - batch.block_start[s]) * kChunk;
  const int64_t end = begin + kChunk < batch.numel[s] ? begin + kChunk : batch.numel[s];
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) op(batch.ptr[s], batch.offset[s] + i, i);
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
    if (need > kMaxBlocks) throw std::invalid_argument("a tensor of more than 2^42 elements is not supported");
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
