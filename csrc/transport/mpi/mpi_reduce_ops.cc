#include "transport/mpi/mpi_reduce_ops.h"

#include <algorithm>

#include "transport/mpi/mpi_env.h"

namespace pycomm::mpi {
namespace {

constexpr int kOps = 3;  // SUM (also AVG), MAX, MIN
MPI_Op g_f16[kOps] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
MPI_Op g_bf16[kOps] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};

int slot(ReduceOp op) { return op == ReduceOp::MAX ? 1 : op == ReduceOp::MIN ? 2 : 0; }

template <typename T, int kSlot>
void reduce16(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  const int n = *len;
#pragma omp simd
  for (int i = 0; i < n; ++i) {
    float x = Num<T>::load(a[i]), y = Num<T>::load(b[i]);
    float r = kSlot == 0 ? x + y : kSlot == 1 ? std::max(x, y) : std::min(x, y);
    b[i] = Num<T>::store(r);
  }
}

template <typename T>
void create(MPI_Op* ops) {
  check(MPI_Op_create(&reduce16<T, 0>, 1, &ops[0]), "MPI_Op_create");
  check(MPI_Op_create(&reduce16<T, 1>, 1, &ops[1]), "MPI_Op_create");
  check(MPI_Op_create(&reduce16<T, 2>, 1, &ops[2]), "MPI_Op_create");
}

}  // namespace

void create_reduce_ops() {
  if (g_f16[0] != MPI_OP_NULL) return;
  create<f16_t>(g_f16);
  create<bf16_t>(g_bf16);
}

void free_reduce_ops() {
  for (int i = 0; i < kOps; ++i) {
    if (g_f16[i] != MPI_OP_NULL) MPI_Op_free(&g_f16[i]);
    if (g_bf16[i] != MPI_OP_NULL) MPI_Op_free(&g_bf16[i]);
  }
}

MPI_Op half_reduce_op(ReduceOp op, DType t) { return (t == DType::F16 ? g_f16 : g_bf16)[slot(op)]; }

}  // namespace pycomm::mpi
