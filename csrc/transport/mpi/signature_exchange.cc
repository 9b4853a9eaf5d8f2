#include "transport/mpi/signature_exchange.h"

#include "transport/mpi/mpi_env.h"

namespace pycomm::mpi {

SignatureExchange::~SignatureExchange() {
  // Abandoned mid-exchange (a broken communicator): MPI may still use the buffers.
  if (req_ != MPI_REQUEST_NULL) (void)bufs_.release();
}

bool SignatureExchange::poll(const OpInfo& info, const CommHandles& comm, bool blocking) {
  if (!posted_) {
    bufs_ = std::make_unique<Buffers>();
    bufs_->mine = op_signature(info);
    bufs_->all.assign(static_cast<size_t>(comm.size) * kSignatureLen, 0);
    posted_ = true;
    if (blocking) {
      check(MPI_Allgather(bufs_->mine.data(), kSignatureLen, MPI_INT64_T, bufs_->all.data(), kSignatureLen, MPI_INT64_T,
                          comm.check),
            "op matching (MPI_Allgather)");
      check_signatures(bufs_->all.data(), comm.size, comm.rank, comm.label);
      return true;
    }
    check(MPI_Iallgather(bufs_->mine.data(), kSignatureLen, MPI_INT64_T, bufs_->all.data(), kSignatureLen, MPI_INT64_T,
                         comm.check, &req_),
          "op matching (MPI_Iallgather)");
  }
  if (req_ == MPI_REQUEST_NULL) return true;
  int done = 0;
  check(MPI_Test(&req_, &done, MPI_STATUS_IGNORE), "op matching (MPI_Test)");
  if (!done) return false;
  check_signatures(bufs_->all.data(), comm.size, comm.rank, comm.label);
  return true;
}

}  // namespace pycomm::mpi
