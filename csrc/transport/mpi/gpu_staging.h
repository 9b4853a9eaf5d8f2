// GPU buffers of an MPI op. For an MPI that cannot read device memory they are copied into pinned host
// memory when the op starts and back when it completes; for a GPU-aware MPI (`stage` false) MPI gets
// the device buffers themselves, and starting the op still waits for what the caller's stream had
// queued by submission (MPI knows nothing of streams: it would read a buffer the caller's kernels are
// still writing, or write one they are still reading). Compiled to stubs that refuse without
// PYCOMM_WITH_GPU.
#pragma once

#include <cstdint>
#include <memory>

#include "common/transport.h"

namespace pycomm::mpi {

class GpuStaging {
 public:
  // Called in the submitting thread: records an event on the caller's `stream`, so to_host()
  // copies what that stream had produced by submission. `in` is copied to the host at start (may
  // be empty: recv), `out` back to the device at the end (may be empty: send); in-place ops pass
  // the same buffer twice and get one pinned region.
  GpuStaging(Buffer in, Buffer out, uintptr_t stream, bool stage = true);
  ~GpuStaging();
  GpuStaging(const GpuStaging&) = delete;
  GpuStaging& operator=(const GpuStaging&) = delete;

  // The buffers MPI reads and writes: pinned copies, or the device buffers themselves (`stage` false).
  Buffer host_in() const { return host_in_; }
  Buffer host_out() const { return host_out_; }
  void to_host();    // returns once MPI may use host_in() / host_out()
  void to_device();  // returns once `out` holds the result
  void leak();       // MPI may still write into the pinned memory: never reuse it

 private:
  Buffer in_, out_, host_in_, host_out_;
  void* pinned_ = nullptr;
  size_t pinned_bytes_ = 0;
  void* event_ = nullptr;
  void* copy_stream_ = nullptr;
  bool leaked_ = false;
  bool stage_ = true;
};

// x *= factor on a GPU buffer (AVG with a GPU-aware MPI); synchronous.
void scale_device(const Buffer& b, double factor);

}  // namespace pycomm::mpi
