"""mpi4py initialises MPI first; pycomm adopts it: from_mpi4py works before pycomm.init(), init('mpi')
then reuses the same MPI, and at exit pycomm shuts its communicators down before mpi4py finalises."""

from __future__ import annotations

import sys

import torch
from mpi4py import MPI  # initialises MPI (mpi4py asks for MPI_THREAD_MULTIPLE by default)

import pycomm

comm4py = MPI.COMM_WORLD
sub = pycomm.from_mpi4py(comm4py)  # before pycomm.init()
t = torch.tensor([float(comm4py.rank)])
sub.allreduce(t, op=pycomm.SUM)
assert t.item() == comm4py.size * (comm4py.size - 1) / 2, t

world = pycomm.init("mpi")
assert (world.rank, world.size) == (comm4py.rank, comm4py.size)
u = torch.ones(5, dtype=torch.bfloat16)
w = world.allreduce(u, op=pycomm.AVG, async_op=True)
assert comm4py.allreduce(2) == 2 * comm4py.size  # mpi4py traffic alongside pycomm's
w.wait()
assert u.tolist() == [1.0] * 5
print(f"rank {world.rank}: adopted {MPI.Get_library_version().splitlines()[0][:40]!r}", flush=True)
sys.exit(0)  # no pycomm.finalize(): the atexit hook and mpi4py's own finalisation must cooperate
