"""Runs on every task of an `srun --mpi=pmix` step: MPI's world must be SLURM's job step."""

from __future__ import annotations

import os
import sys

from mpi4py import MPI


def main(expected_tasks: int) -> None:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    assert int(os.environ["SLURM_NTASKS"]) == expected_tasks, os.environ["SLURM_NTASKS"]
    assert int(os.environ["SLURM_PROCID"]) == rank, (os.environ["SLURM_PROCID"], rank)
    assert size == expected_tasks, f"MPI world size {size}, expected {expected_tasks} (is PMIx wired up?)"
    total = comm.allreduce(rank, op=MPI.SUM)
    assert total == size * (size - 1) // 2, total
    gathered = comm.allgather(rank)
    assert gathered == list(range(size)), gathered
    print(f"task {rank}/{size} ok", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
