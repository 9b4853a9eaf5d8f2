// Process-wide MPI state: initialisation with MPI_THREAD_MULTIPLE (or adopting an MPI that mpi4py
// or the application already initialised), pycomm's datatypes and reduce ops (16-bit floats reduce
// through user ops in fp32), error translation, and finalisation of every live MPI transport.
#pragma once

#include <mpi.h>

#include <string>

#include "common/transport.h"

namespace pycomm::mpi {

// Initialises MPI once (MPI_Init_thread, MPI_THREAD_MULTIPLE) or adopts an initialised MPI after
// checking it provides MPI_THREAD_MULTIPLE (our progress threads call MPI concurrently). Throws
// PycommError with what to do otherwise.
void ensure_initialized();
bool initialized_by_pycomm();
bool finalized();  // MPI_Finalize has run (by pycomm or anyone)
// Shuts down every live MPI transport, then MPI_Finalize if pycomm initialised MPI and no
// transport was left with an op in flight (a stalled op cannot be finalised around). Returns a
// note for the caller when finalisation had to be skipped, else "".
std::string finalize();

MPI_Datatype datatype(DType t);
// The MPI op for `op` (AVG reduces with SUM; the caller scales) on dtype `t`.
MPI_Op reduce_op(ReduceOp op, DType t);
// Throws PycommError "<what>: MPI error: <MPI_Error_string>" when rc != MPI_SUCCESS.
void check(int rc, const char* what);
// True when GPU buffers may go to MPI directly (CUDA-/ROCm-aware MPI, or PYCOMM_MPI_GPU_AWARE=1).
bool gpu_aware();
std::string library_version();

// Live transports, so finalize() can shut them down first.
class Shutdownable {
 public:
  virtual ~Shutdownable() = default;
  virtual void shutdown() = 0;
  virtual bool left_in_flight() const = 0;  // its queue had to be abandoned
};
void register_live(Shutdownable* t);
void unregister_live(Shutdownable* t);

}  // namespace pycomm::mpi
