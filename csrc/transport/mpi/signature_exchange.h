// Op matching on the MPI transport (diagnostics/op_check.h), always on: before a collective posts
// anything, the ranks allgather their op signatures over CommHandles::check. Besides naming
// mismatched ops, this is what keeps a larger message from ever reaching a smaller buffer: Open
// MPI 4.1's shared-memory single-copy path writes a truncated large message past the receive
// buffer (the "double free or corruption" of mismatched ring all-reduces).
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "diagnostics/op_check.h"
#include "transport/mpi/comm_handles.h"

namespace pycomm::mpi {

class SignatureExchange {
 public:
  ~SignatureExchange();
  // True once every rank's signature is in and equal to this op's; throws MismatchError when one
  // differs. `blocking` (CommHandles::blocking_checks): one MPI_Allgather; else an MPI_Iallgather
  // that later calls poll.
  bool poll(const OpInfo& info, const CommHandles& comm, bool blocking);
  bool pending() const { return req_ != MPI_REQUEST_NULL; }

 private:
  struct Buffers {  // on the heap: leaked if the exchange is abandoned while MPI may still use them
    OpSignature mine{};
    std::vector<int64_t> all;
  };
  std::unique_ptr<Buffers> bufs_;
  MPI_Request req_ = MPI_REQUEST_NULL;
  bool posted_ = false;
};

}  // namespace pycomm::mpi
