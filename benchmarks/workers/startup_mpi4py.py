"""One rank of benchmarks/startup.py's mpi4py peer: `import torch`, `from mpi4py import MPI` (MPI_Init), one
Allreduce on a torch tensor's buffer. The phases are timed here and written to PYCOMM_PROFILE_STARTUP's file
afterwards (startup_marks), so the peer pays nothing of pycomm before its first collective."""

from __future__ import annotations

import time

MAIN_START = time.time()

import torch  # noqa: E402

TORCH_IMPORTED = time.time()

import mpi4py  # noqa: E402

mpi4py.rc.thread_level = "multiple"  # what pycomm asks for too
from mpi4py import MPI  # noqa: E402

MPI_INIT = time.time()


def main() -> None:
    t = torch.ones(1024)
    MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, t.numpy(), op=MPI.SUM)
    done = time.time()
    assert t[0].item() == MPI.COMM_WORLD.size, f"Allreduce of ones gave {t[0].item()}"
    from benchmarks.workers.startup_marks import record

    record(
        [
            ("main_start", MAIN_START),
            ("torch_imported", TORCH_IMPORTED),
            ("mpi_init", MPI_INIT),
            ("first_allreduce", done),
        ]
    )


if __name__ == "__main__":
    main()
