"""Blocking ops (async_op=False) on the caller's thread versus through the progress thread, on real
ranks. A blocking op may run on the caller's thread only while nothing else of its communicator is
queued or in flight; these checks interleave async and blocking ops so that a blocking op that jumped
the queue would pair with a different op on the other rank and give a wrong sum. pycomm.stats()'s
inline_calls tells which path each op took. Run under mpirun with 2 or more ranks:
`PYCOMM_INLINE_BYTES=n python -m tests.comm.workers.inline_path` (unset or 0: every op but host
all-reduces, broadcasts, all-gathers and reduce-scatters must take the queue; those run on
point-to-point messages on the caller's thread at any size)."""

from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np
import torch

import pycomm
from tests.comm.workers.common import as_np, assert_close, rank_input

checks = 0


def ok() -> None:
    global checks
    checks += 1


def inline_calls(op: str = "allreduce") -> int:
    return int(pycomm.stats().get(op, {}).get("inline_calls", 0))


def summed(comm: pycomm.Communicator, numel: int, case: str) -> tuple[torch.Tensor, np.ndarray]:
    """This rank's input of `case` and the sum over every rank's input (computed without communicating)."""
    xs = [rank_input(r, numel, torch.float32, case) for r in range(comm.size)]
    return xs[comm.rank].clone(), np.stack([as_np(x) for x in xs]).sum(0)


def check_idle_blocking_ops(comm: pycomm.Communicator, inline_bytes: int) -> None:
    """Back-to-back blocking ops of every kind on an idle queue: right results, and they ran on the
    caller's thread exactly when PYCOMM_INLINE_BYTES allows it (host all-reduces, broadcasts and
    all-gathers: always)."""
    before = {op: inline_calls(op) for op in ("allreduce", "broadcast", "allgather", "barrier")}
    for i in range(20):
        t, want = summed(comm, 1000, f"idle{i}")
        comm.allreduce(t, op=pycomm.SUM)
        assert_close(t, want, f"blocking allreduce {i}")
    b = torch.full((10,), float(comm.rank))
    comm.broadcast(b, root=comm.size - 1)
    assert bool((b == comm.size - 1).all()), b
    out = torch.zeros(comm.size)
    comm.allgather(out, torch.tensor([float(comm.rank)]))
    assert out.tolist() == [float(r) for r in range(comm.size)], out
    comm.barrier()
    ran_inline = {op: inline_calls(op) - n for op, n in before.items()}
    expect = {"allreduce": 20, "broadcast": 1, "allgather": 1, "barrier": 1 if inline_bytes > 0 else 0}
    assert ran_inline == expect, (ran_inline, expect)
    ok()


def check_over_the_limit_takes_the_queue(comm: pycomm.Communicator, inline_bytes: int) -> None:
    """An all-to-all over PYCOMM_INLINE_BYTES takes the queue; an all-reduce and a broadcast of that
    size still run on the caller's thread (they never block inside MPI)."""
    numel = (inline_bytes // 4 // comm.size + 1) * comm.size  # more float32 than PYCOMM_INLINE_BYTES allows
    if numel > 4 << 20:
        return
    x = torch.full((numel,), float(comm.rank))
    out = torch.zeros(numel)
    before = inline_calls("alltoall")
    comm.alltoall(out, x)
    assert bool((out.view(comm.size, -1) == torch.arange(comm.size).float()[:, None]).all()), "alltoall"
    assert inline_calls("alltoall") == before, "an all-to-all over PYCOMM_INLINE_BYTES ran on the caller's thread"
    b = torch.full((numel,), float(comm.rank))
    before = inline_calls("broadcast")
    comm.broadcast(b, root=0)
    assert bool((b == 0).all()), "broadcast over PYCOMM_INLINE_BYTES"
    assert inline_calls("broadcast") == before + 1, "a blocking host broadcast took the queue"
    t, want = summed(comm, numel, "over")
    before = inline_calls()
    comm.allreduce(t, op=pycomm.SUM)
    assert_close(t, want, "allreduce over PYCOMM_INLINE_BYTES")
    assert inline_calls() == before + 1, "a blocking host all-reduce took the queue"
    ok()


def check_blocking_after_async_keeps_order(comm: pycomm.Communicator) -> None:
    """An async all-reduce still queued or in flight, then a blocking one of the same size: the
    blocking one must wait its turn (same sequence on every rank). Rank 0 submits its blocking op at
    once while the last rank is late, so a blocking op that ran first would meet the async op of the
    other rank and both sums would be wrong."""
    for i in range(6):
        if comm.rank == comm.size - 1:
            time.sleep(0.05)
        a, want_a = summed(comm, 50_000, f"async{i}")
        b, want_b = summed(comm, 50_000, f"blocking{i}")
        work = comm.allreduce(a, op=pycomm.SUM, async_op=True)
        comm.allreduce(b, op=pycomm.SUM)
        work.wait()
        assert_close(a, want_a, f"async allreduce {i}")
        assert_close(b, want_b, f"blocking allreduce after async {i}")
    ok()


def check_async_ops_never_run_inline(comm: pycomm.Communicator) -> None:
    before = inline_calls()
    t, want = summed(comm, 100, "async-only")
    comm.allreduce(t, op=pycomm.SUM, async_op=True).wait()
    assert_close(t, want, "async allreduce")
    assert inline_calls() == before, "an async op ran on the caller's thread"
    ok()


def check_blocking_p2p(comm: pycomm.Communicator) -> None:
    """Blocking send / recv between rank pairs (the ring's neighbours), both orders."""
    n = comm.size
    right, left = (comm.rank + 1) % n, (comm.rank - 1) % n
    got = torch.zeros(5)
    if comm.rank % 2 == 0:
        comm.send(torch.full((5,), float(comm.rank)), right, tag=3)
        comm.recv(got, left, tag=3)
    else:
        comm.recv(got, left, tag=3)
        comm.send(torch.full((5,), float(comm.rank)), right, tag=3)
    assert bool((got == left).all()), (got, left)
    ok()


def check_two_threads_share_the_communicator(comm: pycomm.Communicator) -> None:
    """Thread A waits in a blocking recv (on its own thread when allowed) while thread B sends what the
    neighbour's recv needs: once posted, the recv must not hold back the communicator's later ops (on
    the queue path both are in flight together; a recv that kept the queue to itself until it completed
    would deadlock the ring into a StallError)."""
    n = comm.size
    right, left = (comm.rank + 1) % n, (comm.rank - 1) % n
    got = torch.zeros(5)
    errors: list[BaseException] = []

    def receive() -> None:
        try:
            comm.recv(got, left, tag=7)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    receiver = threading.Thread(target=receive)
    receiver.start()
    time.sleep(0.2)  # the recv is posted before the send is submitted
    comm.isend(torch.full((5,), float(comm.rank)), right, tag=7).wait()
    receiver.join(60)
    assert not receiver.is_alive() and not errors, errors
    assert bool((got == left).all()), (got, left)
    ok()


def check_async_batch_waited_out_of_order(comm: pycomm.Communicator) -> None:
    """Async all-reduces around point-to-point messages, waited out of order: first the last of the
    batch, then two threads at once for different ops of it. Wrong pairing would give wrong sums; an op
    left unstarted, a StallError."""
    n = comm.size
    right, left = (comm.rank + 1) % n, (comm.rank - 1) % n
    for round_ in range(3):
        batch = [summed(comm, 300_000, f"batch{round_}.{i}") for i in range(6)]
        works = [comm.allreduce(t, op=pycomm.SUM, async_op=True) for t, _ in batch[:3]]
        got = torch.zeros(5)
        p2p = [comm.isend(torch.full((5,), float(comm.rank)), right, tag=11), comm.irecv(got, left, tag=11)]
        works += [comm.allreduce(t, op=pycomm.SUM, async_op=True) for t, _ in batch[3:]]
        works[-1].wait()
        errors: list[BaseException] = []

        def wait_for(work: pycomm.Work) -> None:
            try:
                work.wait()
            except BaseException as e:  # noqa: BLE001 - reported by the main thread
                errors.append(e)

        helper = threading.Thread(target=wait_for, args=(works[1],))
        helper.start()
        works[3].wait()
        helper.join(60)
        assert not helper.is_alive() and not errors, errors
        for w in works + p2p:
            w.wait()
        for i, (t, want) in enumerate(batch):
            assert_close(t, want, f"async allreduce {i} of round {round_}")
        assert bool((got == left).all()), (got, left)
    ok()


def check_large_collectives_run_one_at_a_time(comm: pycomm.Communicator) -> None:
    """The progress thread starts a collective larger than 32 KiB only while no other one is in flight
    (queue/op_queue.cc: concurrent ones fought over the cores). pycomm.stats() times each op from its
    start to its completion, so one-at-a-time ops' times add up to at most the batch's wall time; ops
    started together would add up to several times it."""
    batch = [summed(comm, 1 << 20, f"alone{i}") for i in range(8)]
    comm.barrier()
    before = pycomm.stats().get("allreduce", {}).get("seconds", 0.0)
    t0 = time.perf_counter()
    works = [comm.allreduce(t, op=pycomm.SUM, async_op=True) for t, _ in batch]
    for w in works:
        w.wait()
    wall = time.perf_counter() - t0
    busy = pycomm.stats()["allreduce"]["seconds"] - before
    for i, (t, want) in enumerate(batch):
        assert_close(t, want, f"async allreduce {i} of the one-at-a-time batch")
    # disjoint intervals inside the window (the margin: clock reads on two threads)
    assert busy <= wall * 1.05 + 0.002, f"8 large async all-reduces were busy {busy:.4f} s in {wall:.4f} s of wall time"
    ok()


def main() -> int:
    comm = pycomm.init(backend="mpi")  # first: it must reject a malformed PYCOMM_INLINE_BYTES itself
    inline_bytes = int(os.environ.get("PYCOMM_INLINE_BYTES") or 0)
    assert comm.size >= 2, "run on 2 or more ranks"
    check_idle_blocking_ops(comm, inline_bytes)
    check_over_the_limit_takes_the_queue(comm, inline_bytes)
    check_blocking_after_async_keeps_order(comm)
    check_async_ops_never_run_inline(comm)
    check_blocking_p2p(comm)
    check_two_threads_share_the_communicator(comm)
    check_async_batch_waited_out_of_order(comm)
    check_large_collectives_run_one_at_a_time(comm)
    comm.barrier()
    print(f"rank {comm.rank}: {checks} inline-path checks passed", flush=True)
    pycomm.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
