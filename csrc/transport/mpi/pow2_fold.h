// Recursive doubling and halving over any number of ranks (the standard fold of MPICH and Open MPI):
// the largest power of two `pof2` <= size take part, numbered by `vrank`; each of the first
// `rem` = size - pof2 even ranks first hands its data to the odd rank above it, which stands in for
// both, and gets the result back from it at the end.
#pragma once

namespace pycomm::mpi {

struct Pow2Fold {
  int rank, size, pof2, rem;

  Pow2Fold(int rank, int size) : rank(rank), size(size), pof2(1), rem(0) {
    while (pof2 * 2 <= size) pof2 *= 2;
    rem = size - pof2;
  }
  bool power_of_two() const { return rem == 0; }
  bool extra() const { return rank < 2 * rem && rank % 2 == 0; }        // folded into rank + 1
  bool absorbs() const { return rank < 2 * rem && rank % 2 == 1; }      // stands in for rank - 1 too
  int vrank() const { return rank < 2 * rem ? rank / 2 : rank - rem; }  // only when !extra()
  int real(int vr) const { return vr < rem ? 2 * vr + 1 : vr + rem; }   // the rank of vrank vr
};

}  // namespace pycomm::mpi
