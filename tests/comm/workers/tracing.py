"""Runs a known sequence of ops twice, untraced then inside pycomm.profile(DIR), on any launcher (one
process, mpirun, torchrun/gloo): the results must be bit-identical (tracing changes nothing), and
DIR/expected_rank<R>.json lists the ops the trace must show on the world communicator, in order.
With a second directory, the last rank then skips an all-reduce inside pycomm.profile(DIR2): the other
ranks' StallError must carry the flight recorder's dump (printed as MARK lines)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

import pycomm
from tests.comm.workers.common import rank_input


def run_ops(comm: pycomm.Communicator) -> tuple[list[torch.Tensor], list[dict]]:
    """The ops, with their results and what each should look like in a trace (name, count, bytes)."""
    r, n = comm.rank, comm.size
    small = rank_input(r, 256, torch.float32, "small")
    comm.allreduce(small, op=pycomm.SUM)
    large = rank_input(r, 1 << 16, torch.float32, "large")
    comm.allreduce(large, op=pycomm.SUM, async_op=True).wait()
    b = rank_input(r, 1000, torch.float32, "bcast")
    comm.broadcast(b, root=0)
    part = rank_input(r, 100, torch.float32, "gather")
    gathered = torch.empty(100 * n)
    comm.allgather(gathered, part)
    msg, got = rank_input(r, 10, torch.float32, "p2p"), torch.empty(10)
    w = comm.isend(msg, (r + 1) % n, tag=7)
    comm.recv(got, (r - 1) % n, tag=7)
    w.wait()
    fused = [rank_input(r, k, torch.float32, f"fused{k}") for k in (3, 5, 7)]
    comm.allreduce_coalesced(fused, op=pycomm.SUM, async_op=True).wait()
    expected = [
        dict(name="allreduce", count=256, bytes=1024),
        dict(name="allreduce", count=1 << 16, bytes=1 << 18),
        dict(name="broadcast", count=1000, bytes=4000),
        dict(name="allgather", count=100, bytes=400 * n),
        dict(name="send", count=10, bytes=40),
        dict(name="recv", count=10, bytes=40),
        dict(name="allreduce", count=15, bytes=60),
    ]  # the coalesced op's one packed bucket
    return [small, large, b, gathered, got, *fused], expected


def traced(directory: str, stall: str = "") -> None:
    comm = pycomm.init()
    side = comm.split(0) if stall else None  # releases the last rank once rank 0 has its error
    plain, expected = run_ops(comm)
    with pycomm.profile(directory) as p:
        again, _ = run_ops(comm)
    for x, y in zip(plain, again):
        assert torch.equal(x, y), "tracing changed a result"
    Path(directory, f"expected_rank{comm.rank}.json").write_text(json.dumps(expected))
    print(f"MARK rank {comm.rank} traced {p.rank_path} merged {p.merged_path} summary {p.summary}", flush=True)
    if side is not None:
        stall_in_profile(comm, side, stall)


def stall_in_profile(comm: pycomm.Communicator, side: pycomm.Communicator, directory: str) -> None:
    """The last rank skips an all-reduce inside pycomm.profile(directory): the others' StallError (after
    PYCOMM_TIMEOUT=3) carries the flight recorder's dump, which the last rank's watcher answers."""
    os.environ["PYCOMM_TIMEOUT"] = "3"
    pycomm.settings.apply()
    x = torch.ones(1000)
    last = comm.size - 1
    try:
        with pycomm.profile(directory):
            w = comm.allreduce(x, async_op=True, op=pycomm.AVG)
            w.wait()
            print(f"MARK rank {comm.rank} last joint seq {w.info['seq']}", flush=True)  # seqs differ by rank
            if comm.rank == last:
                flag = torch.zeros(1)
                w = side.irecv(flag, 0)
                while not w.is_completed():  # Python keeps running: the flight recorder's watcher answers
                    time.sleep(0.05)
                leave(side)  # inside the block: its end would wait for the others' pings
            comm.allreduce(x, op=pycomm.AVG)  # the last rank never joins
    except pycomm.StallError as e:
        print(f"MARK rank {comm.rank} stall: {e}", flush=True)
    if comm.rank == 0:
        side.send(torch.ones(1), last)
    leave(side)


def leave(side: pycomm.Communicator) -> None:
    """Every rank says it is done, then all leave together: the first to leave without MPI_Finalize makes
    mpirun kill the others, which must have had their say by then."""
    print(f"MARK rank {side.rank} done", flush=True)
    sys.stdout.flush()
    side.barrier()
    os._exit(0)  # the stalled all-reduce can never complete: no MPI_Finalize


if __name__ == "__main__":
    traced(*sys.argv[1:])
