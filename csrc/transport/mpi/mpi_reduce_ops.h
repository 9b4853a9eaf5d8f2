// MPI user reduce ops for float16 and bfloat16 (MPI has no 16-bit float types): each element is
// widened to fp32, reduced, and rounded back once.
#pragma once

#include <mpi.h>

#include "common/transport.h"

namespace pycomm::mpi {

void create_reduce_ops();                     // after MPI_Init
void free_reduce_ops();                       // before MPI_Finalize
MPI_Op half_reduce_op(ReduceOp op, DType t);  // t is F16 or BF16

}  // namespace pycomm::mpi
