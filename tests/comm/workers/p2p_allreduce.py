"""Worker (2 to 5 ranks): pycomm's own host all-reduce on MPI point-to-point messages
(csrc/transport/mpi/allreduce_op.h) against numpy: every dtype and reduce op the all-reduce accepts,
odd element counts, counts below the world size, sizes either side of the fused limit (up to 32 KiB
the data travels with op matching by recursive doubling; above it Rabenseifner on power-of-two worlds,
the ring on others), AVG's result bitwise equal on every rank, async ops mixed with blocking ones
(the queue vs the caller's thread; schedules over 32 KiB run one at a time on the queue), then a
stall: the last rank never calls, the others get StallError naming it. Prints "rank R: N p2p-allreduce
checks passed" and the MARK lines tests/comm/test_p2p_allreduce.py reads."""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import torch

import pycomm
from tests.comm.workers.common import ALL, FLOATS, as_np, assert_close, rank_input, stall_without_last_rank

FUSED_BYTES = 32 << 10  # kFusedAllreduceBytes
checks = 0


def reference(
    comm: pycomm.Communicator, numel: int, dtype: torch.dtype, op: pycomm.ReduceOp, case: str
) -> tuple[torch.Tensor, np.ndarray]:
    xs = np.stack([as_np(rank_input(r, numel, dtype, case)) for r in range(comm.size)])
    want = {pycomm.SUM: xs.sum(0), pycomm.AVG: xs.sum(0) / comm.size, pycomm.MAX: xs.max(0), pycomm.MIN: xs.min(0)}[op]
    return rank_input(comm.rank, numel, dtype, case), want


def counts_for(dtype: torch.dtype, size: int) -> list[int]:
    """Odd counts, fewer elements than ranks, and one element either side of the fused limit."""
    at_limit = FUSED_BYTES // torch.empty(0, dtype=dtype).element_size()
    return [0, 1, 3, size - 1, 1001, at_limit - 1, at_limit, at_limit + 1, 4 * at_limit + 5]


def check_every_dtype_op_and_size(comm: pycomm.Communicator) -> None:
    global checks
    for dtype in ALL:
        ops = [pycomm.SUM, pycomm.MAX, pycomm.MIN] + ([pycomm.AVG] if dtype in FLOATS else [])
        for op in ops:
            for numel in counts_for(dtype, comm.size):
                case = f"{dtype}/{op}/{numel}"
                t, want = reference(comm, numel, dtype, op, case)
                comm.allreduce(t, op=op)
                assert_close(t, want, case, exact=op != pycomm.AVG)
                if op == pycomm.AVG and numel > 0:  # rounding may differ from numpy's, never between ranks
                    everyone = torch.zeros(comm.size * numel, dtype=dtype)
                    comm.allgather(everyone, t)
                    rows = everyone.view(comm.size, numel)
                    assert bool((rows == rows[0]).all()), f"{case}: ranks hold different AVG results"
                checks += 1


def check_large_odd_count(comm: pycomm.Communicator) -> None:
    """A 4 MiB + 3 float32 all-reduce: uneven halves and ring segments at a size past the caches."""
    global checks
    t, want = reference(comm, (1 << 20) + 3, torch.float32, pycomm.SUM, "large")
    comm.allreduce(t, op=pycomm.SUM)
    assert_close(t, want, "large odd count")
    checks += 1


def check_async_then_blocking(comm: pycomm.Communicator) -> None:
    """Async ops queue while a later blocking one waits its turn (eight at a time; those over 32 KiB run
    one after another, csrc/queue/op_queue.cc), and must not take each other's messages. The last rank
    is late, so an op that jumped the queue would pair with the wrong op elsewhere and the sums would be
    wrong."""
    global checks
    for numel in (100, FUSED_BYTES // 4 + 1, 300_001):
        if comm.rank == comm.size - 1:
            time.sleep(0.02)
        pending = [reference(comm, numel, torch.float32, pycomm.SUM, f"async{numel}/{i}") for i in range(8)]
        works = [comm.allreduce(t, op=pycomm.SUM, async_op=True) for t, _ in pending]
        b, want_b = reference(comm, numel, torch.float32, pycomm.SUM, f"blocking{numel}")
        comm.allreduce(b, op=pycomm.SUM)
        for w, (t, want) in zip(works, pending):
            w.wait()
            assert_close(t, want, f"async allreduce of {numel}")
        assert_close(b, want_b, f"blocking allreduce of {numel} after async ones")
        checks += 1


def check_stall_names_the_missing_rank(comm: pycomm.Communicator, numel: int) -> None:
    """The last rank never calls this all-reduce: the others get StallError within PYCOMM_TIMEOUT naming it."""
    side = comm.split(0)  # releases the last rank once the others have their error
    sub = comm.split(0)  # the communicator that stalls (a stall breaks it)
    last = comm.size - 1
    t = torch.ones(numel)
    sub.allreduce(t, op=pycomm.SUM)  # everyone takes part
    stall_without_last_rank(side, last, comm.rank, lambda: sub.allreduce(t, op=pycomm.SUM), f" of {numel}")
    side.barrier()


def main() -> int:
    comm = pycomm.init(backend="mpi")
    assert comm.size >= 2, "run on 2 or more ranks"
    check_every_dtype_op_and_size(comm)
    check_large_odd_count(comm)
    check_async_then_blocking(comm)
    comm.barrier()
    print(f"rank {comm.rank}: {checks} p2p-allreduce checks passed", flush=True)
    if "--stall" in sys.argv:
        check_stall_names_the_missing_rank(comm, 1000)  # data with op matching
        check_stall_names_the_missing_rank(
            comm, 32768
        )  # 128 KiB, above FUSED_BYTES: matched first, then Rabenseifner / ring
        print(f"MARK rank {comm.rank} done", flush=True)
        sys.stdout.flush()
        os._exit(0)  # the stalled all-reduces can never complete
    pycomm.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
