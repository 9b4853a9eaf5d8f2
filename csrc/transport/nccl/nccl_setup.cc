// Creating NCCL communicators: from a unique id, by splitting, and the host-side exchanges they
// need (host names for local_rank, colors and ids for split, op signatures for PYCOMM_DEBUG).
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "common/errors.h"
#include "common/settings.h"
#include "diagnostics/op_check.h"
#include "diagnostics/op_validation.h"
#include "diagnostics/stall.h"
#include "transport/nccl/nccl_transport.h"

namespace pycomm::nccl {
namespace {

void check_init(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw PycommError(std::string(what) + ": NCCL error: " + ncclGetErrorString(r));
}

// Pinned host memory, freed unless leaked (a timed-out copy may still write into it).
struct PinnedBuffer {
  explicit PinnedBuffer(size_t n) { PYCOMM_GPU_CHECK(gpuHostAlloc(&ptr, std::max<size_t>(n, 1), gpuHostAllocDefault)); }
  ~PinnedBuffer() {
    if (ptr) gpuFreeHost(ptr);
  }
  char* data() { return static_cast<char*>(ptr); }
  void* ptr = nullptr;
};

// PYCOMM_NCCL_SPLIT=init forces the portable split (a new communicator from a fresh unique id),
// which NCCL < 2.18 always uses; it lets the fallback be tested on any NCCL.
bool use_comm_split() {
#if PYCOMM_NCCL_HAS_SPLIT
  return !settings().nccl_split_init;
#else
  return false;
#endif
}

}  // namespace

std::unique_ptr<NcclTransport> NcclTransport::create(const ncclUniqueId& id, int rank, int size, int device) {
  int count = 0;
  PYCOMM_GPU_CHECK(gpuGetDeviceCount(&count));
  if (device < 0 || device >= count)
    throw std::invalid_argument("nccl: device " + std::to_string(device) + " is out of range; this process sees " +
                                std::to_string(count) + " GPU(s)");
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument("nccl: rank " + std::to_string(rank) + " is outside a world of size " +
                                std::to_string(size));
  DeviceGuard on_device(device);
  ncclComm_t comm = nullptr;
  check_init(ncclCommInitRank(&comm, size, id, rank), "ncclCommInitRank");
  return std::make_unique<NcclTransport>(comm, device);
}

NcclTransport::NcclTransport(ncclComm_t comm, int device) : device_(device) {
  DeviceGuard on_device(device);
  if (ncclCommUserRank(comm, &rank_) != ncclSuccess || ncclCommCount(comm, &size_) != ncclSuccess) {
    ncclCommAbort(comm);
    throw PycommError("nccl: cannot read the rank and size of a new communicator");
  }
  auto health = std::make_shared<CommHealth>(
      "nccl communicator (rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ")", rank_, size_);
  comm_ = std::make_shared<NcclComm>(comm, health);  // from here on, comm_ owns (and aborts) comm
  PYCOMM_GPU_CHECK(gpuStreamCreateWithFlags(&stream_, gpuStreamNonBlocking));
  PYCOMM_GPU_CHECK(gpuMalloc(&barrier_buf_, sizeof(int32_t)));
  watchdog_ = std::make_unique<NcclWatchdog>(comm_, device_);
  place_on_nodes();
}

std::vector<char> NcclTransport::host_allgather(const void* mine, size_t n, const OpInfo& info) {
  DeviceGuard on_device(device_);
  PinnedBuffer host(n * (size_ + 1));
  std::memcpy(host.data(), mine, n);
  void* dev = nullptr;
  PYCOMM_GPU_CHECK(gpuMallocAsync(&dev, n * (size_ + 1), stream_));
  char* dev_out = static_cast<char*>(dev) + n;
  PYCOMM_GPU_CHECK(gpuMemcpyAsync(dev, host.data(), n, gpuMemcpyHostToDevice, stream_));
  comm_->call(info.name.c_str(), [&](ncclComm_t c) { return ncclAllGather(dev, dev_out, n, ncclUint8, c, stream_); });
  PYCOMM_GPU_CHECK(gpuMemcpyAsync(host.data() + n, dev_out, n * size_, gpuMemcpyDeviceToHost, stream_));
  PYCOMM_GPU_CHECK(gpuFreeAsync(dev, stream_));
  NcclOp op(info, true);
  PYCOMM_GPU_CHECK(gpuEventRecord(op.done, stream_));
  try {
    host_wait(op.done, info, *comm_, stall_timeout_s());
  } catch (...) {
    host.ptr = nullptr;  // leak: the copy into it may still run after the abort
    throw;
  }
  return std::vector<char>(host.data() + n, host.data() + n * (size_ + 1));
}

void NcclTransport::place_on_nodes() {
  char name[HOST_NAME_MAX + 1] = {};
  gethostname(name, HOST_NAME_MAX);
  OpInfo info = split_info("split_shared");
  std::vector<char> all = host_allgather(name, sizeof(name), info);
  local_rank_ = 0;
  local_size_ = 0;
  node_color_ = -1;
  for (int r = 0; r < size_; ++r) {
    if (std::strncmp(all.data() + r * sizeof(name), name, sizeof(name)) != 0) continue;
    if (node_color_ < 0) node_color_ = r;  // a node is named by its lowest rank
    if (r < rank_) ++local_rank_;
    ++local_size_;
  }
}

void NcclTransport::debug_check(const OpInfo& info) {
  OpSignature mine = op_signature(info);
  std::vector<char> all = host_allgather(mine.data(), sizeof(mine), info);
  try {
    check_signatures(reinterpret_cast<const int64_t*>(all.data()), size_, rank_, comm_->health().label());
  } catch (const MismatchError& e) {
    comm_->abort(e.what());  // ranks are out of step: collectives already queued would never match
    throw;
  }
}

std::unique_ptr<Transport> NcclTransport::split(int color, int key) { return split_as("split", color, key); }

std::unique_ptr<Transport> NcclTransport::split_shared(int key) { return split_as("split_shared", node_color_, key); }

std::unique_ptr<Transport> NcclTransport::split_as(const char* name, int color, int key) {
  std::lock_guard<std::mutex> lk(submit_mu_);
  comm_->throw_if_broken(name);
  DeviceGuard on_device(device_);
  OpInfo info = split_info(name);
  info.seq = next_seq_++;
  // Every rank shows its (color, key): this bounded exchange also proves all ranks reached the
  // split, so the blocking NCCL calls below cannot hang on a rank that skipped it.
  int64_t mine[2] = {color, key};
  std::vector<char> raw = host_allgather(mine, sizeof(mine), info);
  const int64_t* all = reinterpret_cast<const int64_t*>(raw.data());
  if (use_comm_split()) {
#if PYCOMM_NCCL_HAS_SPLIT
    ncclComm_t child = nullptr;
    comm_->call(name, [&](ncclComm_t c) {
      return ncclCommSplit(c, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, nullptr);
    });
    if (color < 0 || child == nullptr) return nullptr;
    return std::make_unique<NcclTransport>(child, device_);
#endif
  }
  // Portable split: members ordered by (key, rank); the first one makes the new unique id.
  std::vector<int> members;
  for (int r = 0; r < size_; ++r)
    if (color >= 0 && all[2 * r] == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return all[2 * a + 1] < all[2 * b + 1]; });
  ncclUniqueId id{};
  if (!members.empty() && members.front() == rank_) check_init(ncclGetUniqueId(&id), "ncclGetUniqueId");
  std::vector<char> ids = host_allgather(&id, sizeof(id), info);
  if (color < 0) return nullptr;
  std::memcpy(&id, ids.data() + members.front() * sizeof(id), sizeof(id));
  int new_rank = static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
  ncclComm_t child = nullptr;
  check_init(ncclCommInitRank(&child, static_cast<int>(members.size()), id, new_rank), name);
  return std::make_unique<NcclTransport>(child, device_);
}

}  // namespace pycomm::nccl
