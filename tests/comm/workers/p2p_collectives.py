"""Worker (2 to 5 ranks): pycomm's own host broadcast, all-gather and reduce-scatter on MPI
point-to-point messages (csrc/transport/mpi/broadcast_op.h, allgather_op.h, reduce_scatter_op.h)
against numpy: every root, every dtype (and reduce op), odd counts, counts below the world size, sizes
either side of each switch (up to PYCOMM_EAGER_BYTES the data rides in op matching; then broadcast's
binomial tree up to 512 KiB, scatter + all-gather above it; recursive doubling / halving on power-of-two
worlds, the ring on others), reduce-scatter's input left untouched, async ops mixed with blocking ones
(the queue vs the caller's thread), mismatched roots and sizes on the eager and the scheduled path and
across the eager limit giving MismatchError, and a peer whose core keeps another eager limit (its data
of the wrong size) refused with MismatchError, the caller's tensor untouched; then with --stall a rank
that never calls gives the others StallError naming it. With --phases the checks run again under other
settings (PHASES: another eager limit, dedicated cores, a different window on each rank) on a split made
under them. Prints "rank R: N p2p-collective[/phase] checks passed" and the MARK lines
tests/comm/test_p2p_collectives.py reads."""

from __future__ import annotations

import os
import sys
import time
from typing import Callable

import numpy as np
import torch

import pycomm
from pycomm import settings
from pycomm._build import core
from tests.comm.workers.common import ALL, FLOATS, as_np, assert_close, rank_input, stall_without_last_rank
from tests.comm.workers.fusion_common import expect_raises

FUSED_BYTES = settings.get("PYCOMM_EAGER_BYTES")  # up to here the data rides in op matching
SCATTER_BYTES = 512 << 10  # kBroadcastScatterBytes: broadcast's scatter + all-gather from here (3+ ranks,
# not oversubscribed: PYCOMM_OVERSUBSCRIBED=0 forces it on a small machine)
checks = 0
# --fused-only: the all-gather and reduce-scatter at the sizes op matching carries (its blocks per doubling step)
FUSED_ONLY = "--fused-only" in sys.argv


def passed() -> None:
    global checks
    checks += 1


def item(dtype: torch.dtype) -> int:
    return torch.empty(0, dtype=dtype).element_size()


def around(total_bytes: int, per: int) -> list[int]:
    """Element counts whose `per`-element multiple lies one either side of `total_bytes`."""
    at = max(1, total_bytes // per)
    return [at - 1, at, at + 1]


def broadcast_counts(dtype: torch.dtype, size: int) -> list[int]:
    counts = [0, 1, 3, size - 1, 1001] + around(FUSED_BYTES, item(dtype))
    if dtype in (torch.float32, torch.uint8, torch.bfloat16):  # the scheduled sizes move bytes alike
        counts += around(SCATTER_BYTES, item(dtype)) + [(4 << 20) // item(dtype) + 3]
    return counts


def check_broadcast(comm: pycomm.Communicator) -> None:
    for dtype in ALL:
        for numel in broadcast_counts(dtype, comm.size):
            for root in range(comm.size):
                case = f"broadcast/{dtype}/{numel}/root{root}"
                want = as_np(rank_input(root, numel, dtype, case))
                t = rank_input(comm.rank, numel, dtype, case)
                comm.broadcast(t, root=root)
                assert_close(t, want, case)
                passed()


def gather_counts(dtype: torch.dtype, size: int) -> list[int]:
    """Per-rank counts: the output (size times them) either side of the fused limit; float32's largest
    block is cut into more 1 MiB messages (kCopySegmentBytes) than the schedule keeps in flight on ranks up
    to the core count (4), sent from the input while it is copied into the output. With --fused-only, the
    counts whose whole buffer rides in op matching."""
    counts = [0, 1, 3, 1001] + around(FUSED_BYTES, size * item(dtype))
    if FUSED_ONLY:
        return [n for n in counts if n * size * item(dtype) <= FUSED_BYTES]
    if dtype in (torch.float32, torch.uint8):
        counts.append((1 << 20) // item(dtype) + 3)
    if dtype == torch.float32:
        counts.append((5 << 20) // item(dtype) + 3)
    return counts


def check_allgather(comm: pycomm.Communicator) -> None:
    for dtype in ALL:
        for numel in gather_counts(dtype, comm.size):
            case = f"allgather/{dtype}/{numel}"
            want = np.concatenate([as_np(rank_input(r, numel, dtype, case)) for r in range(comm.size)])
            out = torch.full((comm.size * numel,), 7, dtype=dtype)
            comm.allgather(out, rank_input(comm.rank, numel, dtype, case))
            assert_close(out, want, case)
            passed()


def reduced(xs: np.ndarray, op: pycomm.ReduceOp, size: int) -> np.ndarray:
    return {pycomm.SUM: xs.sum(0), pycomm.AVG: xs.sum(0) / size, pycomm.MAX: xs.max(0), pycomm.MIN: xs.min(0)}[op]


def check_reduce_scatter(comm: pycomm.Communicator) -> None:
    for dtype in ALL:
        ops = [pycomm.SUM, pycomm.MAX, pycomm.MIN] + ([pycomm.AVG] if dtype in FLOATS else [])
        for op in ops:
            for numel in gather_counts(dtype, comm.size):
                case = f"reduce_scatter/{dtype}/{op}/{numel}"
                xs = np.stack([as_np(rank_input(r, comm.size * numel, dtype, case)) for r in range(comm.size)])
                want = reduced(xs, op, comm.size)[comm.rank * numel : (comm.rank + 1) * numel]
                t = rank_input(comm.rank, comm.size * numel, dtype, case)
                before = t.clone()
                out = torch.full((numel,), 7, dtype=dtype)
                comm.reduce_scatter(out, t, op=op)
                assert_close(out, want, case, exact=op != pycomm.AVG)
                assert torch.equal(t, before), f"{case}: the input was modified"
                passed()


def check_async_then_blocking(comm: pycomm.Communicator) -> None:
    """Async ops of all three kinds queue while a later blocking one waits its turn (the last rank is
    late, so an op that jumped the queue would pair with another op elsewhere and give wrong data). Each
    round starts with a 1 MiB all-reduce: ops up to 32 KiB run alongside its schedule (larger ones wait
    for it, csrc/queue/op_queue.cc), so their messages must not take each other's."""
    size = comm.size
    for numel in (100, FUSED_BYTES // 4 + 1, 300_001):
        if comm.rank == size - 1:
            time.sleep(0.02)
        checks_after: list[Callable[[], None]] = []
        xs_big = np.stack([as_np(rank_input(r, 1 << 18, torch.float32, f"big{numel}")) for r in range(size)])
        big = rank_input(comm.rank, 1 << 18, torch.float32, f"big{numel}")
        works = [comm.allreduce(big, op=pycomm.SUM, async_op=True)]
        checks_after.append(lambda t=big, w=xs_big.sum(0), c=f"big{numel}": assert_close(t, w, c + " allreduce"))
        for i in range(3):
            case = f"async{numel}/{i}"
            root = i % size
            b = rank_input(comm.rank, numel, torch.float32, case + "b")
            works.append(comm.broadcast(b, root=root, async_op=True))
            want_b = as_np(rank_input(root, numel, torch.float32, case + "b"))
            checks_after.append(lambda b=b, w=want_b, c=case: assert_close(b, w, c + " broadcast"))
            g = torch.zeros(size * numel)
            works.append(comm.allgather(g, rank_input(comm.rank, numel, torch.float32, case + "g"), async_op=True))
            want_g = np.concatenate([as_np(rank_input(r, numel, torch.float32, case + "g")) for r in range(size)])
            checks_after.append(lambda g=g, w=want_g, c=case: assert_close(g, w, c + " allgather"))
            xs = np.stack([as_np(rank_input(r, size * numel, torch.float32, case + "s")) for r in range(size)])
            s = torch.zeros(numel)
            works.append(
                comm.reduce_scatter(s, rank_input(comm.rank, size * numel, torch.float32, case + "s"), async_op=True)
            )
            want_s = xs.sum(0)[comm.rank * numel : (comm.rank + 1) * numel]
            checks_after.append(lambda s=s, w=want_s, c=case: assert_close(s, w, c + " reduce_scatter"))
        last = rank_input(comm.rank, numel, torch.float32, f"blocking{numel}")
        comm.broadcast(last, root=size - 1)
        for w in reversed(works):
            w.wait()
        for check in checks_after:
            check()
        assert_close(
            last, as_np(rank_input(size - 1, numel, torch.float32, f"blocking{numel}")), "blocking after async"
        )
        passed()


def on_fresh(world: pycomm.Communicator, run: Callable[[pycomm.Communicator], object], pattern: str) -> None:
    """`run` on a new communicator (a mismatch breaks it) raises MismatchError matching `pattern`."""
    sub = world.split(0)
    expect_raises(pycomm.MismatchError, pattern, lambda: run(sub))
    sub.shutdown()
    passed()


def then_barrier(run: Callable[[pycomm.Communicator], object]) -> Callable[[pycomm.Communicator], object]:
    """`run`, then a barrier: a broadcast is matched one way, so its root hears of a mismatch at its next op."""
    return lambda c: (run(c), c.barrier())


def check_mismatches(world: pycomm.Communicator) -> None:
    """Roots and sizes that differ with the data in op matching (a quarter of the eager limit), on the
    scheduled path (1 MiB) and either side of the eager limit: MismatchError on every rank, before any
    data reaches a tensor (a broadcast's root at its next op, or while its schedule waits)."""
    r, size = world.rank, world.size
    for n in (max(1, FUSED_BYTES // 16 // size), (1 << 20) // 4):
        # every rank its own root: all return, and the next op finds it
        on_fresh(
            world,
            then_barrier(lambda c: c.broadcast(torch.ones(n), root=r)),
            r"(roots differ\)|the ops differ\).*broadcast #\d+|disagree on an earlier broadcast)",
        )
        on_fresh(world, then_barrier(lambda c: c.broadcast(torch.ones(n + r), root=0)), r"sizes differ.*broadcast #\d+")
        on_fresh(
            world,
            lambda c: c.allgather(torch.zeros(c.size * (n + r)), torch.ones(n + r)),
            r"sizes differ.*allgather #\d+",
        )
        on_fresh(
            world,
            lambda c: c.reduce_scatter(torch.zeros(n + r), torch.ones(c.size * (n + r))),
            r"sizes differ.*reduce_scatter #\d+",
        )
        # different collectives of the same bytes: rank 0 broadcasts, the others all-gather
        on_fresh(
            world,
            then_barrier(
                lambda c: (
                    c.broadcast(torch.ones(size * n), root=0)
                    if r == 0
                    else c.allgather(torch.zeros(size * n), torch.ones(n))
                )
            ),
            r"the ops differ\): rank \d submitted",
        )
    # rank 0 at the limit (data in op matching), the others one element past it (scheduled)
    at = FUSED_BYTES // 4 // size * size
    n = at if r == 0 else at + size
    # the root (one way) may meet the others' symmetric message at its next op before their refusal
    on_fresh(
        world,
        then_barrier(lambda c: c.broadcast(torch.ones(n), root=0)),
        r"(sizes differ|the ops differ).*broadcast #\d+",
    )
    on_fresh(world, lambda c: c.allgather(torch.zeros(n), torch.ones(n // size)), r"sizes differ.*allgather #\d+")
    on_fresh(
        world, lambda c: c.reduce_scatter(torch.zeros(n // size), torch.ones(n)), r"sizes differ.*reduce_scatter #\d+"
    )


def check_wrong_size_payload(world: pycomm.Communicator) -> None:
    """2 ranks: rank 1's core keeps 4x the eager limit for a new communicator (behind the settings'
    agreement, which compares the environment): at twice the limit it expects rank 0's broadcast in op
    matching, matched one way, while rank 0 matches it on every rank and sends no data. The ops match, yet
    both refuse; no tensor is touched. (On more ranks only the ranks that exchange with a
    disagreeing one see it; the others would wait in the schedule until PYCOMM_TIMEOUT.)"""
    c = core()
    if world.rank == world.size - 1:
        c.apply_settings({**c.settings(), "PYCOMM_EAGER_BYTES": 4 * FUSED_BYTES})
    sub = pycomm.Communicator(world._t.split(0, world.rank), "eager-limit-differs")  # no settings.apply()
    settings.apply()
    numel = 2 * FUSED_BYTES // 4 // world.size * world.size
    t = torch.full((numel,), 5.0 + world.rank)
    # rank 1 matches one way (data in op matching), rank 0 on every rank (scheduled): rank 1 refuses rank 0's
    # message, and rank 0 hears of it while it waits
    pattern = (
        r"rank 1 refused this rank's \(0\) op, matched one way.*it ran the same op with every rank's signature"
        if world.rank == 0
        else r"rank 0 ran this broadcast .* with every rank's signature .*where rank 1 matched it one way"
    )
    expect_raises(pycomm.MismatchError, pattern, lambda: sub.broadcast(t, root=0))
    assert torch.equal(t, torch.full((numel,), 5.0 + world.rank)), "the refused broadcast wrote the tensor"
    sub.shutdown()
    passed()


STALLS: dict[str, Callable[[pycomm.Communicator, int], object]] = {
    # a broadcast with its data in op matching is matched one way: its root stalls at its next op
    "broadcast": lambda c, n: (c.broadcast(torch.ones(n), root=0), c.barrier()),
    "allgather": lambda c, n: c.allgather(torch.zeros(c.size * n), torch.ones(n)),
    "reduce_scatter": lambda c, n: c.reduce_scatter(torch.zeros(n), torch.ones(c.size * n)),
}


def check_stall_names_the_missing_rank(comm: pycomm.Communicator, kind: str, numel: int) -> None:
    """The last rank never calls this op: the others get StallError within PYCOMM_TIMEOUT naming it."""
    side = comm.split(0)  # releases the last rank once the others have their error
    sub = comm.split(0)  # the communicator that stalls (a stall breaks it)
    STALLS[kind](sub, numel)  # everyone takes part once
    stall_without_last_rank(side, comm.size - 1, comm.rank, lambda: STALLS[kind](sub, numel), f" of {kind} {numel}")
    side.barrier()


# Settings each phase runs under, on a new communicator of the same ranks (a split reads the environment
# afresh, and agrees `oversubscribed` anew): one launch serves them all instead of one launch each.
PHASES: dict[str, dict[str, str]] = {
    "default": {},
    "eager-16k": {"PYCOMM_EAGER_BYTES": "16384"},  # the fold of recursive doubling in op matching on 3 ranks
    "dedicated-cores": {"PYCOMM_OVERSUBSCRIBED": "0"},  # broadcast's scatter + all-gather on a small machine
    "window-per-rank": {},  # rank 0 alone says its node is oversubscribed (set in phase_environment)
}


def phase_environment(phase: str, rank: int) -> dict[str, str]:
    if phase == "window-per-rank":
        return {"PYCOMM_OVERSUBSCRIBED": "1" if rank == 0 else "0"}
    return PHASES[phase]


def run_checks(comm: pycomm.Communicator, label: str) -> None:
    """Every check on `comm`, then "rank R: N <label> checks passed" and its agreed `oversubscribed`."""
    global checks, FUSED_BYTES
    checks = 0
    FUSED_BYTES = settings.get("PYCOMM_EAGER_BYTES")  # this phase's limit (the worker's sizes straddle it)
    # the core took this phase's settings when `comm` was made (else its sizes straddle another limit)
    assert core().settings()["PYCOMM_EAGER_BYTES"] == FUSED_BYTES, f"{label}: the core kept another eager limit"
    check_broadcast(comm)
    check_allgather(comm)
    check_reduce_scatter(comm)
    check_async_then_blocking(comm)
    check_mismatches(comm)
    if comm.size == 2:
        check_wrong_size_payload(comm)
    comm.barrier()
    print(f"rank {comm.rank}: {checks} {label} checks passed", flush=True)
    print(f"rank {comm.rank}: {label} oversubscribed {comm.oversubscribed}", flush=True)


def main() -> int:
    """argv: --stall, --fused-only, or --phases a,b,... (names of PHASES, in order; default: default). The
    default phase runs on the world as launched, each other one on a split made under its settings."""
    comm = pycomm.init(backend="mpi")
    assert comm.size >= 2, "run on 2 or more ranks"
    if "--stall" in sys.argv:
        for kind in STALLS:
            for numel in (100, (1 << 20) // 4):  # data with op matching; matched, then scheduled
                check_stall_names_the_missing_rank(comm, kind, numel)
        print(f"MARK rank {comm.rank} done", flush=True)
        os._exit(0)  # the stalled ops can never complete
    if FUSED_ONLY:
        check_allgather(comm)
        check_reduce_scatter(comm)
        comm.barrier()
        print(f"rank {comm.rank}: {checks} p2p-collective/fused checks passed", flush=True)
        pycomm.finalize()
        return 0
    phases = sys.argv[sys.argv.index("--phases") + 1].split(",") if "--phases" in sys.argv else ["default"]
    launched = dict(os.environ)
    for phase in phases:
        os.environ.clear()
        os.environ.update({**launched, **phase_environment(phase, comm.rank)})
        if phase == "default":
            run_checks(comm, "p2p-collective")
            continue
        sub = comm.split(0)
        run_checks(sub, f"p2p-collective/{phase}")
        sub.shutdown()
    os.environ.clear()
    os.environ.update(launched)
    pycomm.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
