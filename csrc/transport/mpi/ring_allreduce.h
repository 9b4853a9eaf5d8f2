// Ring all-reduce for large host buffers: reduce-scatter then allgather over MPI_Sendrecv, reducing
// with MPI_Reduce_local (any MPI_Op, pycomm's f16/bf16 ones included), into a scratch buffer that is
// kept across calls.
//
// Why not just MPI_Allreduce: Open MPI 4.1's tuned all-reduce mallocs a message-sized temporary on
// every call. Above glibc's largest mmap threshold (32 MiB) each call then maps fresh pages, faults
// every one of them in and unmaps them again; that made 64 MiB all-reduces 2-3x slower than gloo
// (which keeps its buffers) on a single node. The ring moves the same bytes as Open MPI's ring.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

namespace pycomm::mpi {

// Messages from this many bytes on use the ring (below it Open MPI's own temporaries are reused by
// malloc and its algorithms are at least as fast).
constexpr int64_t kRingAllreduceMinBytes = int64_t{32} << 20;

// Whether `count` elements of `elem_size` bytes over `size` ranks go through ring_allreduce.
bool use_ring_allreduce(int64_t count, int64_t elem_size, int size);

// In place on `buf` (count elements of `type`, count <= INT_MAX) over `comm`, which must carry no other
// traffic (pycomm gives it a private duplicate). `scratch` grows to one segment and is reused.
// Every rank must pass the same count and type: segments are cut from the local count, and a rank
// that receives a longer segment than it posted gets a truncated message, which Open MPI 4.1's
// shared-memory single-copy path writes past the buffer. MpiOp's op matching (signature_exchange.h)
// establishes this before the ring starts.
void ring_allreduce(void* buf, int64_t count, MPI_Datatype type, int64_t elem_size, MPI_Op op, MPI_Comm comm,
                    std::vector<char>& scratch);

}  // namespace pycomm::mpi
