#include "transport/mpi/allreduce_op.h"

#include <algorithm>

#include "host/scale.h"
#include "transport/mpi/allreduce_schedules.h"

namespace pycomm::mpi {
namespace {

constexpr int64_t kMaxChunk = int64_t{1} << 30;  // elements per schedule (MPI counts are ints)

// Ops in flight at once on CommHandles::allreduce are told apart by tag: collective_index is the same
// on every rank for the same op.
int tag_of(const OpInfo& info, int tag_ub) {
  const int64_t span = std::min(tag_ub, 1 << 20);
  return static_cast<int>(std::max<int64_t>(info.collective_index, 0) % span);
}

}  // namespace

P2pAllreduceOp::P2pAllreduceOp(OpInfo info, std::shared_ptr<CommHandles> comm, Buffer buf, MPI_Datatype type, MPI_Op op,
                               double avg_scale)
    : QueuedOp(std::move(info)), comm_(std::move(comm)), buf_(buf), type_(type), op_(op), avg_scale_(avg_scale) {
  if (this->info.bytes <= kFusedAllreduceBytes && buf_.count > 0)
    matching_.fuse(buf_.ptr, buf_.count, type_, op_, this->info.bytes);
  this->info.algorithm = this->info.bytes <= kFusedAllreduceBytes ? kInOpMatching : allreduce_algorithm(comm_->size);
}

bool P2pAllreduceOp::prepare() { return matching_.poll(info, *comm_); }

void P2pAllreduceOp::start() {
  if (info.bytes <= kFusedAllreduceBytes || comm_->size == 1) return;
  const int64_t es = static_cast<int64_t>(dtype_size(buf_.dtype));
  const int tag = tag_of(info, comm_->tag_ub);
  for (int64_t b = 0; b < buf_.count; b += kMaxChunk) {
    const int64_t n = std::min(kMaxChunk, buf_.count - b);
    chunks_.push_back(std::make_unique<P2pSchedule>(allreduce_steps(n, comm_->rank, comm_->size),
                                                    static_cast<char*>(buf_.ptr) + b * es, type_, es, op_,
                                                    comm_->allreduce, tag, *comm_->scratch));
  }
}

bool P2pAllreduceOp::test() {
  for (; chunk_ < chunks_.size(); ++chunk_)
    if (!chunks_[chunk_]->poll(info.name.c_str())) return false;
  if (avg_scale_ != 0) scale_host(buf_.ptr, buf_.count, buf_.dtype, avg_scale_);
  return true;
}

}  // namespace pycomm::mpi
