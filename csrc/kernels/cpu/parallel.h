// Splits segment work into cache-sized chunks spread over OpenMP threads, so one huge tensor and
// many tiny ones parallelize equally well. `op(segment, begin, end)` handles a contiguous range.
#pragma once

#include <cstdint>
#include <vector>

#include "common/kernel_threads.h"
#include "kernels/segments.h"

namespace pycomm::cpu {

constexpr int64_t kChunkElems = 1 << 15;
// Below this many elements in total, a parallel region costs more than it saves.
constexpr int64_t kParallelThreshold = 1 << 16;

int num_threads();  // PYCOMM_NUM_THREADS, else OpenMP's default

// run(c) for c in [0, n), over OpenMP threads when the work covers `elems` >= kParallelThreshold
// elements and this thread may spread its kernels (common/kernel_threads.h); else a plain loop, with
// no parallel region at all: even an if(false) one enters libgomp (a 1-element AVG scaling cost
// 0.6 us in one).
template <typename Run>
void run_chunks(int64_t n, int64_t elems, Run run) {
  if (elems < kParallelThreshold || kernels_on_this_thread_only) {
    for (int64_t c = 0; c < n; ++c) run(c);
    return;
  }
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (int64_t c = 0; c < n; ++c) run(c);
}

template <typename Op>
void for_each_chunk(const std::vector<Segment>& segs, Op op) {
  struct Chunk {
    int32_t seg;
    int64_t begin, end;
  };
  std::vector<Chunk> chunks;
  int64_t total = 0;
  for (size_t s = 0; s < segs.size(); ++s) {
    total += segs[s].numel;
    for (int64_t b = 0; b < segs[s].numel; b += kChunkElems)
      chunks.push_back({static_cast<int32_t>(s), b, b + kChunkElems < segs[s].numel ? b + kChunkElems : segs[s].numel});
  }
  const int64_t n = static_cast<int64_t>(chunks.size());
  run_chunks(n, total, [&](int64_t c) { op(segs[chunks[c].seg], chunks[c].begin, chunks[c].end); });
}

// The same for one flat range [0, numel), in chunks aligned to `align` elements (a block size).
template <typename Op>
void for_each_range(int64_t numel, int64_t align, Op op) {
  int64_t chunk = kChunkElems - kChunkElems % align;
  if (chunk <= 0) chunk = align;
  const int64_t n = (numel + chunk - 1) / chunk;
  run_chunks(n, numel, [&](int64_t c) { op(c * chunk, (c + 1) * chunk < numel ? (c + 1) * chunk : numel); });
}

}  // namespace pycomm::cpu
