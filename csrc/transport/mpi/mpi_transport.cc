#include "transport/mpi/mpi_transport.h"

#include <sched.h>

#include <climits>
#include <cstdlib>
#include <stdexcept>

#include "common/errors.h"
#include "common/settings.h"
#include "diagnostics/op_validation.h"
#include "queue/inline_run.h"
#include "queue/spin.h"
#include "transport/mpi/allgather_op.h"
#include "transport/mpi/allreduce_op.h"
#include "transport/mpi/broadcast_op.h"
#include "transport/mpi/p2p.h"
#include "transport/mpi/progress_window.h"
#include "transport/mpi/reduce_scatter_op.h"

namespace pycomm::mpi {
namespace {

// More ranks on this node (`node`: its ranks) than cores in the union of their CPU affinities: bound
// ranks see one core each, unbound ones the node's. Collective over `node`.
bool node_crowded(MPI_Comm node, int local_size) {
  cpu_set_t mine, all;
  if (sched_getaffinity(0, sizeof mine, &mine) != 0) CPU_ZERO(&mine);  // unknown: adds no core
  check(MPI_Allreduce(&mine, &all, static_cast<int>(sizeof mine), MPI_BYTE, MPI_BOR, node),
        "MPI_Allreduce (CPU affinity)");
  const int cores = CPU_COUNT(&all);
  return cores > 0 && local_size > cores;
}

// MPI counts are ints: larger buffers go as several calls of at most this many elements.
constexpr int64_t kMaxChunk = int64_t{1} << 30;

int as_count(int64_t n, const char* what) {
  if (n > INT_MAX)
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(n) +
                                " elements per rank exceed MPI's int count; split the tensor");
  return static_cast<int>(n);
}

void* at(const Buffer& b, int64_t elems) { return static_cast<char*>(b.ptr) + elems * dtype_size(b.dtype); }

// Calls fn(ptr, bytes) on consecutive whole-element pieces of at most kMaxChunk bytes.
template <typename Fn>
void for_each_piece(const Buffer& b, Fn fn) {
  const int64_t es = static_cast<int64_t>(dtype_size(b.dtype));
  const int64_t step = kMaxChunk / es;
  for (int64_t e = 0; e < b.count; e += step) fn(at(b, e), static_cast<int>(std::min(step, b.count - e) * es));
}

void refuse_if_finalized(const OpInfo& info) {
  if (finalized()) throw PycommError(info.name + ": MPI was finalized (pycomm.finalize())");
}

// Elements of `dtype` travel as bytes where nothing is reduced (any dtype, one code path).
MPI_Datatype bytes_of(DType dtype, MPI_Datatype* owned) {
  check(MPI_Type_contiguous(static_cast<int>(dtype_size(dtype)), MPI_BYTE, owned), "MPI_Type_contiguous");
  check(MPI_Type_commit(owned), "MPI_Type_commit");
  return *owned;
}

}  // namespace

MpiTransport::MpiTransport(MPI_Comm comm) : handles_(std::make_shared<CommHandles>()) {
  ensure_initialized();
  handles_->comm = comm;
  check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Comm_rank(comm, &handles_->rank), "MPI_Comm_rank");
  check(MPI_Comm_size(comm, &handles_->size), "MPI_Comm_size");
  MPI_Comm node;
  check(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, handles_->rank, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  const bool detected = node_crowded(node, local_size);  // collective: called whatever the setting says
  const int forced = settings().oversubscribed;
  const bool crowded = forced >= 0 ? forced == 1 : detected;
  MPI_Comm_free(&node);
  note_node_oversubscribed(crowded);  // pollers yield only when ranks outnumber the cores (queue/spin.h)
  note_ranks_on_node(local_size);     // what cores_contended() leaves to this node's own ranks
  int any_crowded = crowded ? 1 : 0;
  check(MPI_Allreduce(MPI_IN_PLACE, &any_crowded, 1, MPI_INT, MPI_MAX, comm), "MPI_Allreduce (oversubscribed)");
  handles_->oversubscribed = any_crowded != 0;
  int* tag_ub = nullptr;
  int has_tag_ub = 0;
  check(MPI_Comm_get_attr(comm, MPI_TAG_UB, &tag_ub, &has_tag_ub), "MPI_Comm_get_attr (MPI_TAG_UB)");
  if (has_tag_ub && tag_ub) handles_->tag_ub = *tag_ub;  // else MPI's guaranteed minimum, 32767
  check(MPI_Comm_dup(comm, &handles_->allreduce), "MPI_Comm_dup (all-reduce)");
  check(MPI_Comm_set_errhandler(handles_->allreduce, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  if (settings().mpi_nonblocking) handles_->blocking = false;
  handles_->eager_bytes = settings().eager_bytes;
  check(MPI_Comm_dup(comm, &handles_->check), "MPI_Comm_dup (op matching)");
  check(MPI_Comm_set_errhandler(handles_->check, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  init(handles_->rank, handles_->size, local_rank, local_size);
  health()->set_peer_progress(ProgressWindow::create(handles_->check, handles_->rank, handles_->size));
  handles_->label = health()->label();
  register_live(this);
}

std::optional<std::vector<int64_t>> MpiTransport::gather_at_creation(const std::vector<int64_t>& mine) {
  // On the op-matching duplicate, which carries nothing else before the first collective.
  std::vector<int64_t> all(mine.size() * static_cast<size_t>(handles_->size));
  check(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, all.data(),
                      static_cast<int>(mine.size()), MPI_INT64_T, handles_->check),
        "MPI_Allgather (settings every rank must share)");
  return all;
}

std::unique_ptr<MpiTransport> MpiTransport::duplicate_of(MPI_Comm comm) {
  ensure_initialized();
  MPI_Comm dup;
  check(MPI_Comm_dup(comm, &dup), "MPI_Comm_dup");
  return std::make_unique<MpiTransport>(dup);
}

MpiTransport::~MpiTransport() {
  shutdown();
  unregister_live(this);
}

void MpiTransport::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (finalized()) return;  // nothing may be called any more; the queue has nothing MPI can progress
  if (!stop_queue()) {
    abandoned_ = true;  // the thread may still be inside MPI on this communicator: leave it alone
    return;
  }
  if (health()->has_abandoned()) {
    abandoned_ = true;  // dropped requests may still reference the communicator
    return;
  }
  // A broken communicator keeps its MPI communicators: a peer may still send into them (the root of a
  // one-way broadcast this rank refused runs on until it hears of it), and once freed, their context id
  // could go to a new communicator whose receives would meet those messages.
  if (health()->broken()) return;
  if (handles_->check != MPI_COMM_NULL) MPI_Comm_free(&handles_->check);
  if (handles_->allreduce != MPI_COMM_NULL) MPI_Comm_free(&handles_->allreduce);
  MPI_Comm_free(&handles_->comm);
}

std::unique_ptr<QueuedOp> MpiTransport::make_op(OpInfo info, Buffer in, Buffer out, MpiOp::Post post, double avg_scale,
                                                uintptr_t stream) {
  refuse_if_finalized(info);
  info.algorithm = "mpi";  // the MPI library's own collective
  return std::make_unique<MpiOp>(std::move(info), handles_, in, out, std::move(post), avg_scale,
                                 staging_for(in, out, stream));
}

std::unique_ptr<GpuStaging> MpiTransport::staging_for(const Buffer& in, const Buffer& out, uintptr_t stream) {
  if (in.device < 0 && out.device < 0) return nullptr;
  return std::make_unique<GpuStaging>(in, out, stream, /*stage=*/!gpu_aware());
}

std::unique_ptr<QueuedOp> MpiTransport::make_allreduce(OpInfo info, Buffer buf, ReduceOp op, uintptr_t stream) {
  auto h = handles_;
  MPI_Op mop = reduce_op(op, buf.dtype);
  MPI_Datatype type = datatype(buf.dtype);
  double scale = op == ReduceOp::AVG ? 1.0 / size() : 0.0;
  if (buf.device < 0) {  // in place on the tensor's own memory, on point-to-point messages
    refuse_if_finalized(info);
    return std::make_unique<P2pAllreduceOp>(std::move(info), handles_, buf, type, mop, scale);
  }
  MpiOp::Post post = [h, mop, type](const Buffer& in, const Buffer&, bool blocking, std::vector<MPI_Request>& reqs) {
    for (int64_t b = 0; b < in.count; b += kMaxChunk) {
      int n = static_cast<int>(std::min(kMaxChunk, in.count - b));
      void* p = at(in, b);
      collective(
          blocking, reqs, "allreduce", [&] { return MPI_Allreduce(MPI_IN_PLACE, p, n, type, mop, h->comm); },
          [&](MPI_Request* r) { return MPI_Iallreduce(MPI_IN_PLACE, p, n, type, mop, h->comm, r); });
    }
  };
  return make_op(std::move(info), buf, buf, std::move(post), scale, stream);
}

std::unique_ptr<QueuedOp> MpiTransport::make_broadcast(OpInfo info, Buffer buf, int root, uintptr_t stream) {
  if (buf.device < 0) {  // on point-to-point messages, like the all-reduce
    refuse_if_finalized(info);
    return std::make_unique<P2pBroadcastOp>(std::move(info), handles_, buf, root);
  }
  auto h = handles_;
  MpiOp::Post post = [h, root](const Buffer& in, const Buffer&, bool blocking, std::vector<MPI_Request>& reqs) {
    for_each_piece(in, [&](void* p, int n) {
      collective(
          blocking, reqs, "broadcast", [&] { return MPI_Bcast(p, n, MPI_BYTE, root, h->comm); },
          [&](MPI_Request* r) { return MPI_Ibcast(p, n, MPI_BYTE, root, h->comm, r); });
    });
  };
  return make_op(std::move(info), buf, buf, std::move(post), 0.0, stream);
}

std::unique_ptr<QueuedOp> MpiTransport::make_allgather(OpInfo info, Buffer out, Buffer in, uintptr_t stream) {
  as_count(in.count, "allgather");
  if (in.device < 0 && out.device < 0) {
    refuse_if_finalized(info);
    return std::make_unique<P2pAllgatherOp>(std::move(info), handles_, out, in);
  }
  auto h = handles_;
  MpiOp::Post post = [h](const Buffer& i, const Buffer& o, bool blocking, std::vector<MPI_Request>& reqs) {
    if (i.count == 0) return;
    MPI_Datatype t;
    bytes_of(i.dtype, &t);
    const int n = static_cast<int>(i.count);
    collective(
        blocking, reqs, "allgather", [&] { return MPI_Allgather(i.ptr, n, t, o.ptr, n, t, h->comm); },
        [&](MPI_Request* r) { return MPI_Iallgather(i.ptr, n, t, o.ptr, n, t, h->comm, r); });
    MPI_Type_free(&t);  // a freed type stays valid for pending requests
  };
  return make_op(std::move(info), in, out, std::move(post), 0.0, stream);
}

std::unique_ptr<QueuedOp> MpiTransport::make_reduce_scatter(OpInfo info, Buffer out, Buffer in, ReduceOp op,
                                                            uintptr_t stream) {
  as_count(out.count, "reduce_scatter");
  MPI_Op mop = reduce_op(op, in.dtype);
  MPI_Datatype type = datatype(in.dtype);
  double scale = op == ReduceOp::AVG ? 1.0 / size() : 0.0;
  if (in.device < 0 && out.device < 0) {
    refuse_if_finalized(info);
    return std::make_unique<P2pReduceScatterOp>(std::move(info), handles_, out, in, type, mop, scale);
  }
  auto h = handles_;
  MpiOp::Post post = [h, mop, type](const Buffer& i, const Buffer& o, bool blocking, std::vector<MPI_Request>& reqs) {
    if (o.count == 0) return;
    const int n = static_cast<int>(o.count);
    collective(
        blocking, reqs, "reduce_scatter", [&] { return MPI_Reduce_scatter_block(i.ptr, o.ptr, n, type, mop, h->comm); },
        [&](MPI_Request* r) { return MPI_Ireduce_scatter_block(i.ptr, o.ptr, n, type, mop, h->comm, r); });
  };
  return make_op(std::move(info), in, out, std::move(post), scale, stream);
}

std::unique_ptr<QueuedOp> MpiTransport::make_alltoall(OpInfo info, Buffer out, Buffer in, uintptr_t stream) {
  auto h = handles_;
  as_count(in.count / size(), "alltoall");
  MpiOp::Post post = [h](const Buffer& i, const Buffer& o, bool blocking, std::vector<MPI_Request>& reqs) {
    const int per_rank = static_cast<int>(i.count / h->size);
    if (per_rank == 0) return;
    MPI_Datatype t;
    bytes_of(i.dtype, &t);
    collective(
        blocking, reqs, "alltoall", [&] { return MPI_Alltoall(i.ptr, per_rank, t, o.ptr, per_rank, t, h->comm); },
        [&](MPI_Request* r) { return MPI_Ialltoall(i.ptr, per_rank, t, o.ptr, per_rank, t, h->comm, r); });
    MPI_Type_free(&t);
  };
  return make_op(std::move(info), in, out, std::move(post), 0.0, stream);
}

std::unique_ptr<QueuedOp> MpiTransport::make_send(OpInfo info, Buffer buf, int, int,
                                                  const std::optional<std::vector<int64_t>>& shape, uintptr_t stream) {
  refuse_if_finalized(info);
  Buffer none{nullptr, 0, buf.dtype, buf.device};
  return std::make_unique<P2pSendOp>(std::move(info), handles_, buf, shape, staging_for(buf, none, stream));
}

std::unique_ptr<QueuedOp> MpiTransport::make_recv(OpInfo info, Buffer buf, int, int, uintptr_t stream) {
  refuse_if_finalized(info);
  Buffer none{nullptr, 0, buf.dtype, buf.device};
  return std::make_unique<P2pRecvOp>(std::move(info), handles_, buf, false, staging_for(none, buf, stream));
}

std::unique_ptr<QueuedOp> MpiTransport::make_recv_new(OpInfo info, int, int) {
  refuse_if_finalized(info);
  return std::make_unique<P2pRecvOp>(std::move(info), handles_, Buffer{}, true, nullptr);
}

std::optional<P2pMessage> MpiTransport::try_probe(int src, int tag) {
  if (finalized()) throw PycommError("probe: MPI was finalized (pycomm.finalize())");
  return probe_header(*handles_, src, tag);
}

std::unique_ptr<QueuedOp> MpiTransport::make_match(OpInfo info) {
  // Nothing but op matching (MpiOp::prepare) under the compound op's own name.
  MpiOp::Post post = [](const Buffer&, const Buffer&, bool, std::vector<MPI_Request>&) {};
  auto op = make_op(std::move(info), Buffer{}, Buffer{}, std::move(post), 0.0, 0);
  op->info.algorithm = kInOpMatching;  // op matching alone
  return op;
}

std::unique_ptr<QueuedOp> MpiTransport::make_barrier(OpInfo info) {
  auto h = handles_;
  MpiOp::Post post = [h](const Buffer&, const Buffer&, bool blocking, std::vector<MPI_Request>& reqs) {
    collective(
        blocking, reqs, "barrier", [&] { return MPI_Barrier(h->comm); },
        [&](MPI_Request* r) { return MPI_Ibarrier(h->comm, r); });
  };
  return make_op(std::move(info), Buffer{}, Buffer{}, std::move(post), 0.0, 0);
}

std::unique_ptr<Transport> MpiTransport::split_with(const char* name, std::function<void(MPI_Comm*)> make) {
  // Shared: after a stall the op may still finish once this frame is gone.
  auto out = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
  queue().run_and_wait(std::make_unique<BlockingMpiOp>(split_info(name), handles_, [out, make] { make(out.get()); }));
  if (*out == MPI_COMM_NULL) return nullptr;
  return std::make_unique<MpiTransport>(*out);
}

std::unique_ptr<Transport> MpiTransport::split(int color, int key) {
  auto h = handles_;
  return split_with("split", [h, color, key](MPI_Comm* out) {
    check(MPI_Comm_split(h->comm, color < 0 ? MPI_UNDEFINED : color, key, out), "split (MPI_Comm_split)");
  });
}

std::unique_ptr<Transport> MpiTransport::dup() {
  auto h = handles_;
  return split_with("dup", [h](MPI_Comm* out) { check(MPI_Comm_dup(h->comm, out), "dup (MPI_Comm_dup)"); });
}

std::unique_ptr<Transport> MpiTransport::split_shared(int key) {
  auto h = handles_;
  return split_with("split_shared", [h, key](MPI_Comm* out) {
    check(MPI_Comm_split_type(h->comm, MPI_COMM_TYPE_SHARED, key, MPI_INFO_NULL, out),
          "split_by_node (MPI_Comm_split_type)");
  });
}

}  // namespace pycomm::mpi
