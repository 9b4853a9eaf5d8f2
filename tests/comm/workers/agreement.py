"""Settings every rank must share, set differently on 2 real MPI ranks: the new communicator (the world at
init, a split, a dup) is refused on both ranks with a SettingError naming the variable and both values,
for a flag, a choice and a number; set alike again, the same calls succeed and the ops run.
Run: `mpirun -n 2 python -m tests.comm.workers.agreement`."""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

import torch

import pycomm

RANK = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))


def refused(make: Callable[[], Any], name: str, value: str, *fragments: str) -> None:
    """`make` run with `name`=value on rank 1 only raises SettingError with `fragments`; the variable is
    cleared again afterwards."""
    if RANK == 1:
        os.environ[name] = value
    try:
        make()
    except pycomm.SettingError as e:
        missing = [f for f in (f"{name} must be the same on every rank", *fragments) if f not in str(e)]
        assert not missing, f"rank {RANK}: {missing} not in: {e}"
    else:
        raise AssertionError(f"rank {RANK}: {name}={value} on rank 1 alone was accepted")
    finally:
        os.environ.pop(name, None)


def main() -> int:
    refused(pycomm.init, "PYCOMM_DEBUG", "1", "rank 0 has PYCOMM_DEBUG=0 and rank 1 has PYCOMM_DEBUG=1")
    comm = pycomm.init()
    refused(
        lambda: comm.split(0),
        "PYCOMM_NCCL_SPLIT",
        "init",
        "rank 0 has PYCOMM_NCCL_SPLIT=split and rank 1 has PYCOMM_NCCL_SPLIT=init",
    )
    refused(
        comm.dup,
        "PYCOMM_QUANTIZED_SEGMENT",
        "4096",
        "rank 0 has it unset (default 1048576 for host tensors",
        "rank 1 has PYCOMM_QUANTIZED_SEGMENT=4096",
    )
    os.environ["PYCOMM_RANKS_PER_NODE"] = "1"  # alike on both: agreed
    both = comm.split(0)
    del os.environ["PYCOMM_RANKS_PER_NODE"]
    t = torch.tensor([float(RANK + 1)])
    both.allreduce(t, op=pycomm.SUM)
    assert t.item() == 3.0, t
    print(f"rank {RANK}: agreement ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
