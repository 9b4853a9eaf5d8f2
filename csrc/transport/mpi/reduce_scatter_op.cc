#include "transport/mpi/reduce_scatter_op.h"

#include <cstring>

#include "host/scale.h"
#include "transport/mpi/reduce_scatter_schedules.h"

namespace pycomm::mpi {

P2pReduceScatterOp::P2pReduceScatterOp(OpInfo info, std::shared_ptr<CommHandles> comm, Buffer out, Buffer in,
                                       MPI_Datatype type, MPI_Op op, double avg_scale)
    : P2pCollectiveOp(std::move(info), std::move(comm)),
      out_(out),
      in_(in),
      type_(type),
      op_(op),
      avg_scale_(avg_scale) {
  const int64_t bytes = block_bytes() * comm_->size;
  this->info.algorithm = fused() ? kInOpMatching : reduce_scatter_algorithm(comm_->size);
  if (!fused() || bytes == 0) return;
  matching_.fuse_blocks(SignatureExchange::Blocks::kScatter, in_.ptr, out_.ptr, comm_->size, out_.count, block_bytes(),
                        type_, op_);
}

void P2pReduceScatterOp::start() {
  if (fused() || out_.count == 0 || comm_->size == 1) return;
  // Two ranks reduce straight from the input into the output (one step); more need the work buffer.
  void* work = comm_->size > 2 ? work_buffer(static_cast<size_t>(block_bytes() * comm_->size)) : nullptr;
  run(reduce_scatter_steps(out_.count, comm_->rank, comm_->size), {in_.ptr, work, out_.ptr}, type_,
      static_cast<int64_t>(dtype_size(out_.dtype)), op_);
}

void P2pReduceScatterOp::finish() {
  const size_t block = static_cast<size_t>(block_bytes());
  if (block == 0) return;
  if (!fused() && comm_->size == 1) std::memcpy(out_.ptr, in_.ptr, block);  // fused: op matching wrote it
  if (avg_scale_ != 0) scale_host(out_.ptr, out_.count, out_.dtype, avg_scale_);
}

}  // namespace pycomm::mpi
