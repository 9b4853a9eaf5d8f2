"""Stall reports from the ranks' progress, 3 real ranks: on gloo under torchrun (its agent serves the store,
so a stopped rank leaves it up), and on MPI under mpirun. `missing`: the last rank sleeps instead of calling
an all-reduce; the others' StallError must name it as the rank that has not reached it, with its latest
collective. `stopped`: the last rank submits the all-reduce and then stops (SIGSTOP) before its peers call
it; they must name it as the rank that stopped answering, inside the op. argv: the case, a directory for
the waiting ranks' flag files, the backend (gloo by default). Prints MARK lines tests/comm/test_faults.py
checks."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import torch

import pycomm


def missing(comm: pycomm.Communicator, flags: Path) -> None:
    """The last rank waits for the others' flag files, not in a pycomm op: gloo bounds every wait by
    PYCOMM_TIMEOUT, point to point included."""
    x = torch.ones(1000)
    comm.allreduce(x, op=pycomm.SUM)  # everyone takes part
    last = comm.size - 1
    if comm.rank == last:
        while not all((flags / f"rank{r}").exists() for r in range(last)):
            time.sleep(0.05)
    else:
        t0 = time.perf_counter()
        try:
            comm.allreduce(x, op=pycomm.SUM)  # the last rank never calls it
        except pycomm.StallError as e:
            print(f"MARK rank {comm.rank} stall after {time.perf_counter() - t0:.1f} s: {e}", flush=True)
        else:
            print(f"MARK rank {comm.rank} no stall error", flush=True)
        (flags / f"rank{comm.rank}").touch()
    print(f"MARK rank {comm.rank} done", flush=True)
    os._exit(0)  # the stalled all-reduce can never complete


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def stopped(comm: pycomm.Communicator, flags: Path) -> None:
    pids = torch.empty(comm.size, dtype=torch.int64)
    comm.allgather(pids, torch.tensor([os.getpid()], dtype=torch.int64))
    last = comm.size - 1
    peers = comm.split(0 if comm.rank < last else 1)  # the ranks that wait, to agree when to wake the last one
    x = torch.ones(1000)
    comm.allreduce(x, op=pycomm.SUM)  # everyone takes part
    if comm.rank == last:
        comm.allreduce(x, op=pycomm.SUM, async_op=True)  # submitted: its record says so within a beat
        time.sleep(2.0)
        os.kill(os.getpid(), signal.SIGSTOP)  # a peer sends SIGCONT once every other rank has its error
        print(f"MARK rank {comm.rank} done", flush=True)
        os._exit(0)
    while not _stopped(int(pids[last])):
        time.sleep(0.05)
    t0 = time.perf_counter()
    try:
        comm.allreduce(x, op=pycomm.SUM)
    except pycomm.StallError as e:
        print(f"MARK rank {comm.rank} stall after {time.perf_counter() - t0:.1f} s: {e}", flush=True)
    else:
        print(f"MARK rank {comm.rank} no stall error", flush=True)
    peers.barrier()
    if comm.rank == 0:
        os.kill(int(pids[last]), signal.SIGCONT)
    print(f"MARK rank {comm.rank} done", flush=True)
    os._exit(0)


if __name__ == "__main__":
    backend = sys.argv[3] if len(sys.argv) > 3 else "gloo"
    {"missing": missing, "stopped": stopped}[sys.argv[1]](pycomm.init(backend=backend), Path(sys.argv[2]))
