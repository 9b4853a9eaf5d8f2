#include "transport/mpi/gpu_staging.h"

#include <map>
#include <mutex>
#include <stdexcept>

#include "common/errors.h"

#ifdef PYCOMM_WITH_GPU
#include "common/gpu_compat.h"
#include "kernels/pack.h"
#endif

namespace pycomm::mpi {

#ifdef PYCOMM_WITH_GPU
namespace {

// Pinned blocks are slow to allocate (milliseconds): keep freed ones for reuse, by size.
std::mutex g_pool_mu;
std::multimap<size_t, void*> g_pool;

void* take_pinned(size_t bytes) {
  {
    std::lock_guard<std::mutex> lk(g_pool_mu);
    auto it = g_pool.lower_bound(bytes);
    if (it != g_pool.end() && it->first <= 2 * bytes) {
      void* p = it->second;
      g_pool.erase(it);
      return p;
    }
  }
  void* p = nullptr;
  PYCOMM_GPU_CHECK(gpuHostAlloc(&p, bytes, gpuHostAllocDefault));
  return p;
}

void give_pinned(void* p, size_t bytes) {
  std::lock_guard<std::mutex> lk(g_pool_mu);
  g_pool.emplace(bytes, p);
}

size_t round_up(size_t b) { return (b + 4095) / 4096 * 4096; }

}  // namespace

GpuStaging::GpuStaging(Buffer in, Buffer out, uintptr_t stream, bool stage)
    : in_(in), out_(out), host_in_(in), host_out_(out), stage_(stage) {
  const int device = in.count ? in.device : out.device;
  DeviceGuard guard(device);
  gpuEvent_t ev;
  PYCOMM_GPU_CHECK(gpuEventCreateWithFlags(&ev, gpuEventDisableTiming));
  event_ = ev;
  PYCOMM_GPU_CHECK(gpuEventRecord(ev, reinterpret_cast<gpuStream_t>(stream)));
  if (!stage_) return;
  const bool same = in.ptr == out.ptr;
  size_t in_bytes = round_up(static_cast<size_t>(in.bytes()));
  pinned_bytes_ = (same ? 0 : in_bytes) + round_up(static_cast<size_t>(out.bytes()));
  if (pinned_bytes_ == 0) pinned_bytes_ = in_bytes;
  if (pinned_bytes_ > 0) pinned_ = take_pinned(pinned_bytes_);
  host_in_ = in;
  host_in_.ptr = pinned_;
  host_in_.device = -1;
  host_out_ = out;
  host_out_.ptr = same ? pinned_ : static_cast<char*>(pinned_) + in_bytes;
  host_out_.device = -1;
  gpuStream_t s;
  PYCOMM_GPU_CHECK(gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking));
  copy_stream_ = s;
}

GpuStaging::~GpuStaging() {
  // teardown: nothing useful to do with an error here
  if (event_) (void)gpuEventDestroy(static_cast<gpuEvent_t>(event_));
  if (copy_stream_) (void)gpuStreamDestroy(static_cast<gpuStream_t>(copy_stream_));
  if (pinned_ && !leaked_) give_pinned(pinned_, pinned_bytes_);
}

void GpuStaging::to_host() {
  if (!stage_) {
    PYCOMM_GPU_CHECK(gpuEventSynchronize(static_cast<gpuEvent_t>(event_)));
    return;
  }
  auto s = static_cast<gpuStream_t>(copy_stream_);
  PYCOMM_GPU_CHECK(gpuStreamWaitEvent(s, static_cast<gpuEvent_t>(event_), 0));
  if (in_.count > 0) {
    DeviceGuard guard(in_.device);
    PYCOMM_GPU_CHECK(gpuMemcpyAsync(host_in_.ptr, in_.ptr, in_.bytes(), gpuMemcpyDefault, s));
  }
  PYCOMM_GPU_CHECK(gpuStreamSynchronize(s));
}

void GpuStaging::to_device() {
  if (!stage_ || out_.count == 0) return;
  DeviceGuard guard(out_.device);
  auto s = static_cast<gpuStream_t>(copy_stream_);
  PYCOMM_GPU_CHECK(gpuMemcpyAsync(out_.ptr, host_out_.ptr, out_.bytes(), gpuMemcpyDefault, s));
  PYCOMM_GPU_CHECK(gpuStreamSynchronize(s));
}

void GpuStaging::leak() { leaked_ = true; }

void scale_device(const Buffer& b, double factor) {
  if (b.count == 0) return;
  PackArgs a;
  a.segs = {Segment{b.ptr, 0, b.count}};
  a.tensor_dtype = b.dtype;
  a.bucket = b.ptr;  // element-wise in place: each element is read before it is written
  a.bucket_dtype = b.dtype;
  a.scale = factor;
  DeviceGuard guard(b.device);
  gpuStream_t s;
  PYCOMM_GPU_CHECK(gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking));
  pack_gpu(a, b.device, reinterpret_cast<uintptr_t>(s));
  PYCOMM_GPU_CHECK(gpuStreamSynchronize(s));
  PYCOMM_GPU_CHECK(gpuStreamDestroy(s));
}
#else
GpuStaging::GpuStaging(Buffer, Buffer, uintptr_t, bool) {
  throw std::invalid_argument("got a GPU buffer, but this build of pycomm has no CUDA/HIP support");
}
GpuStaging::~GpuStaging() {}
void GpuStaging::to_host() {}
void GpuStaging::to_device() {}
void GpuStaging::leak() { leaked_ = true; }
void scale_device(const Buffer&, double) {
  throw std::invalid_argument("got a GPU buffer, but this build of pycomm has no CUDA/HIP support");
}
#endif

}  // namespace pycomm::mpi
