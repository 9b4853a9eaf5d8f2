#include "transport/mpi/ring_allreduce.h"

#include <algorithm>

#include "transport/mpi/mpi_env.h"

namespace pycomm::mpi {
namespace {

constexpr int kRingTag = 0;

// Segment i of `count` elements split over `size` ranks, the first count % size one element longer.
int64_t seg_begin(int64_t count, int size, int i) {
  return i * (count / size) + std::min<int64_t>(i, count % size);
}
int seg_len(int64_t count, int size, int i) {
  return static_cast<int>(seg_begin(count, size, i + 1) - seg_begin(count, size, i));
}

}  // namespace

bool use_ring_allreduce(int64_t count, int64_t elem_size, int size) {
  return size > 1 && count >= size && count * elem_size >= kRingAllreduceMinBytes;
}

void ring_allreduce(void* buf, int64_t count, MPI_Datatype type, int64_t elem_size, MPI_Op op, MPI_Comm comm,
                    std::vector<char>& scratch) {
  int rank = 0, size = 1;
  check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  char* base = static_cast<char*>(buf);
  auto seg = [&](int i) { return base + seg_begin(count, size, i) * elem_size; };
  const size_t longest = static_cast<size_t>(seg_len(count, size, 0) * elem_size);
  if (scratch.size() < longest) scratch.resize(longest);

  // Reduce-scatter: after size-1 steps this rank holds the full reduction of segment rank+1.
  for (int s = 0; s < size - 1; ++s) {
    const int send = (rank - s + size) % size, recv = (rank - s - 1 + size) % size;
    check(MPI_Sendrecv(seg(send), seg_len(count, size, send), type, right, kRingTag, scratch.data(),
                       seg_len(count, size, recv), type, left, kRingTag, comm, MPI_STATUS_IGNORE),
          "allreduce (ring reduce-scatter)");
    check(MPI_Reduce_local(scratch.data(), seg(recv), seg_len(count, size, recv), type, op),
          "allreduce (MPI_Reduce_local)");
  }
  // Allgather: pass the reduced segments around the ring, straight into place.
  for (int s = 0; s < size - 1; ++s) {
    const int send = (rank + 1 - s + size) % size, recv = (rank - s + size) % size;
    check(MPI_Sendrecv(seg(send), seg_len(count, size, send), type, right, kRingTag, seg(recv),
                       seg_len(count, size, recv), type, left, kRingTag, comm, MPI_STATUS_IGNORE),
          "allreduce (ring allgather)");
  }
}

}  // namespace pycomm::mpi
