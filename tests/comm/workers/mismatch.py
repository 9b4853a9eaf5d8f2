"""Worker (2 ranks; on 3, only the case of one rank differing from two that agree): ranks that
disagree on an op get a clear MismatchError, never memory corruption, a hang or a silent wrong
answer, in the default mode (no PYCOMM_DEBUG) and on every path: the
MPI transport's own ring all-reduce (blocking, >= 32 MiB), MPI's collectives (small, async, on the
caller's thread under PYCOMM_INLINE_BYTES, nonblocking under PYCOMM_MPI_NONBLOCKING), point-to-point,
allreduce_quantized and allreduce_coalesced. The ring case runs first: it used to crash the smaller
rank with "double free or corruption".

Every case runs on a fresh communicator split from the world (a mismatch breaks its communicator) and
asserts the message on each rank; prints "mismatch ok: <case>" per case and a count at the end.
argv: [gloo] runs the collective and compound cases on the gloo transport (under torchrun): the same
messages, from its own signature exchange (pycomm/gloo/matching.py), and its broken communicators'
release while the peer keeps its own open; its point-to-point mismatches are
tests/comm/workers/gloo_edges.py's."""

from __future__ import annotations

import gc
import sys
from typing import Callable

import torch

import pycomm
from tests.comm.workers.fusion_common import expect_raises

MIB = 1 << 20
passed = 0


def done(case: str) -> None:
    global passed
    passed += 1
    print(f"mismatch ok: {case}", flush=True)


def fresh(world: pycomm.Communicator) -> pycomm.Communicator:
    sub = world.split(0)
    assert sub is not None
    return sub


def both_ranks(
    world: pycomm.Communicator, case: str, run: Callable[[pycomm.Communicator], object], pattern: str
) -> pycomm.Communicator:
    """`run` raises MismatchError matching `pattern` (a regex; {me} / {peer} are this / the other rank).
    Returns the communicator it broke, shut down."""
    sub = fresh(world)
    me, peer = sub.rank, 1 - sub.rank
    expect_raises(pycomm.MismatchError, pattern.format(me=me, peer=peer), lambda: run(sub))
    # The communicator is broken now, with nothing posted: later ops fail at once, shutdown is clean.
    expect_raises(pycomm.PycommError, "is broken", lambda: sub.allreduce(torch.ones(1), op=pycomm.AVG))
    sub.shutdown()
    done(case)
    return sub


def is_gloo(world: pycomm.Communicator) -> bool:
    return sys.argv[1:2] == ["gloo"]


def one_way(
    world: pycomm.Communicator,
    case: str,
    make: Callable[[int], torch.Tensor],
    root: Callable[[int], int],
    receiver_pattern: str | None,
    root_pattern: str,
) -> None:
    """A broadcast on MPI is matched one way: the root returns without hearing from the others. A
    receiver whose op differs raises MismatchError matching `receiver_pattern` ({me} / {peer}) in the
    broadcast, its buffer untouched; the root hears of it at its next op, or in the broadcast while its
    schedule waits for that receiver (`root_pattern`). Where every rank took itself for the root
    (`receiver_pattern` None), all return and all raise at the next op.
    `make(rank)`: the rank's buffer (filled with rank + 1); `root(rank)`: the root the rank passes."""
    sub = fresh(world)
    me, peer = sub.rank, 1 - sub.rank
    t = make(me).fill_(me + 1)
    if root(me) == me:  # in the broadcast (a schedule still waiting for the receiver) or at the next op

        def broadcast_then_next() -> None:
            sub.broadcast(t, root=me)
            sub.allreduce(torch.ones(4), op=pycomm.SUM)

        expect_raises(pycomm.MismatchError, root_pattern.format(me=me, peer=peer), broadcast_then_next)
    else:
        assert receiver_pattern is not None
        expect_raises(
            pycomm.MismatchError, receiver_pattern.format(me=me, peer=peer), lambda: sub.broadcast(t, root=root(me))
        )
        assert bool((t == me + 1).all()), "a mismatched broadcast wrote into the receiver's buffer"
    expect_raises(pycomm.PycommError, "is broken", lambda: sub.allreduce(torch.ones(1), op=pycomm.AVG))
    sub.shutdown()
    done(case)


def check_one_way_broadcasts(world: pycomm.Communicator) -> None:
    """Wrong root, size and dtype with the data in op matching (one way), and sizes past it (1 vs 2 MiB)."""
    refused = r"rank {peer} refused this rank's \({me}\) op, matched one way against its broadcast.*"
    one_way(
        world,
        "broadcast roots (0 vs 1)",
        lambda me: torch.ones(10),
        lambda me: me,
        None,
        r"ranks disagree on an earlier broadcast .*: rank {me} and rank {peer} took part in different broadcasts",
    )
    counts = (1000, 2000)
    one_way(
        world,
        "broadcast sizes",
        lambda me: torch.empty(counts[me]),
        lambda me: 0,
        sizes_pattern("broadcast", counts[1], counts[0]),
        refused + sizes_pattern("broadcast", counts[0], counts[1]),
    )
    # past the eager limit, a broadcast is matched on every rank: both raise in it
    n = [MIB // 4, MIB // 2][world.rank]
    both_ranks(
        world,
        "broadcast sizes, scheduled",
        lambda c: c.broadcast(torch.ones(n), root=0),
        sizes_pattern("broadcast", n, 3 * MIB // 4 - n),
    )
    dtypes = (torch.float32, torch.int32)
    one_way(
        world,
        "broadcast dtypes (float32 vs int32)",
        lambda me: torch.empty(1000, dtype=dtypes[me]),
        lambda me: 0,
        r"dtypes differ\): rank {me} submitted broadcast #\d+ \(count 1000, int32.*but rank {peer} submitted "
        r"broadcast #\d+ \(count 1000, float32",
        refused + r"dtypes differ\): rank {me} submitted broadcast #\d+ \(count 1000, float32",
    )


def sizes_pattern(op: str, mine: int, theirs: int, dtype: str = "float32", item: int = 4) -> str:
    """Both ops with their sequence numbers and both sizes, in this rank's order."""
    return (
        rf"sizes differ: {mine * item} vs {theirs * item} bytes\): rank {{me}} submitted {op} #\d+ "
        rf"\(count {mine}, {dtype}, {mine * item} bytes.*but rank {{peer}} submitted {op} #\d+ "
        rf"\(count {theirs}, {dtype}, {theirs * item} bytes"
    )


def check_ring_sizes(world: pycomm.Communicator) -> None:
    """40 vs 48 MiB of float32: both sizes take the ring all-reduce (blocking, >= 32 MiB)."""
    counts = [40 * MIB // 4, 48 * MIB // 4]
    mine, theirs = counts[world.rank], counts[1 - world.rank]
    t = torch.ones(mine)
    both_ranks(
        world,
        "ring all-reduce sizes (40 vs 48 MiB)",
        lambda c: c.allreduce(t, op=pycomm.SUM),
        sizes_pattern("allreduce", mine, theirs),
    )
    assert bool((t == 1).all()), "the buffer was written although the ranks disagreed"


def check_ring_dtypes(world: pycomm.Communicator) -> None:
    """40 MiB of float32 against 40 MiB of int32: same bytes, different meaning."""
    dtype = [torch.float32, torch.int32][world.rank]
    t = torch.ones(40 * MIB // 4, dtype=dtype)
    both_ranks(
        world,
        "ring all-reduce dtypes (float32 vs int32, 40 MiB)",
        lambda c: c.allreduce(t, op=pycomm.SUM),
        r"dtypes differ\): rank {me} submitted allreduce #\d+ .*but rank {peer} submitted allreduce",
    )
    assert bool((t == 1).all())


def check_small_collectives(world: pycomm.Communicator) -> None:
    r = world.rank
    n = [1000, 2000][r]
    both_ranks(
        world,
        "allreduce sizes (1000 vs 2000)",
        lambda c: c.allreduce(torch.ones(n), op=pycomm.SUM),
        sizes_pattern("allreduce", n, 3000 - n),
    )
    both_ranks(
        world,
        "async allreduce sizes",
        lambda c: c.allreduce(torch.ones(n), async_op=True, op=pycomm.AVG).wait(),
        sizes_pattern("allreduce", n, 3000 - n),
    )
    dt = [torch.float32, torch.float64][r]
    both_ranks(
        world,
        "allreduce dtypes (float32 vs float64)",
        lambda c: c.allreduce(torch.ones(1000, dtype=dt), op=pycomm.AVG),
        r"sizes differ: (4000 vs 8000|8000 vs 4000) bytes.*float(32|64).*float(64|32)",
    )
    di = [torch.float32, torch.int32][r]
    both_ranks(
        world,
        "allreduce dtypes (float32 vs int32)",
        lambda c: c.allreduce(torch.ones(1000, dtype=di), op=pycomm.SUM),
        r"dtypes differ\): rank {me} submitted allreduce #\d+ \(count 1000, (float32|int32)",
    )
    op = [pycomm.SUM, pycomm.MAX][r]
    both_ranks(
        world,
        "allreduce reduce ops (SUM vs MAX)",
        lambda c: c.allreduce(torch.ones(10), op=op),
        r"reduce ops differ\): rank {me} submitted allreduce #\d+ \(.*op (SUM|MAX)\) but .*op (MAX|SUM)\)",
    )
    if is_gloo(world):  # gloo's matching is symmetric: both ranks raise in the broadcast itself
        both_ranks(
            world,
            "broadcast roots (0 vs 1)",
            lambda c: c.broadcast(torch.ones(10), root=r),
            r"roots differ\): rank {me} submitted broadcast #\d+ \(.*root {me}\) but rank {peer} .*root {peer}\)",
        )
        both_ranks(
            world,
            "broadcast sizes",
            lambda c: c.broadcast(torch.ones(n), root=0),
            sizes_pattern("broadcast", n, 3000 - n),
        )
    else:
        check_one_way_broadcasts(world)
    both_ranks(
        world,
        "allgather sizes",
        lambda c: c.allgather(torch.zeros(2 * n), torch.ones(n)),
        r"sizes differ.*allgather #\d+ \(count " + str(n),
    )
    both_ranks(
        world,
        "reduce_scatter sizes",
        lambda c: c.reduce_scatter(torch.zeros(n), torch.ones(2 * n)),
        r"sizes differ.*reduce_scatter #\d+ \(count " + str(2 * n),
    )
    both_ranks(
        world,
        "alltoall sizes",
        lambda c: c.alltoall(torch.zeros(2 * n), torch.ones(2 * n)),
        r"sizes differ.*alltoall #\d+ \(count " + str(2 * n),
    )
    # 256 KiB and 2 MiB lie either side of PYCOMM_INLINE_BYTES=1048576 (one rank's op may run on its
    # caller's thread, the other's on the queue): both must still run the same exchange.
    m = [64 * 1024, 512 * 1024][r]
    both_ranks(
        world,
        "allreduce sizes across the inline limit (256 KiB vs 2 MiB)",
        lambda c: c.allreduce(torch.ones(m), op=pycomm.SUM),
        sizes_pattern("allreduce", m, 576 * 1024 - m),
    )
    kind = ["allreduce", "barrier"][r]
    both_ranks(
        world,
        "allreduce vs barrier",
        lambda c: c.allreduce(torch.ones(4), op=pycomm.AVG) if r == 0 else c.barrier(),
        r"the ops differ\): rank {me} submitted " + kind,
    )


def quantized_or_plain(c: pycomm.Communicator) -> None:
    """Rank 0 an allreduce_quantized (its op matching, then its first call's split), the others an allreduce."""
    t = torch.ones(4096)
    if c.rank == 0:
        c.allreduce_quantized(t, op=pycomm.AVG, async_op=True).wait()
    else:
        c.allreduce(t, op=pycomm.AVG)


def quantized_or_plain_pattern(rank: int) -> str:
    kinds = ["allreduce_quantized", "allreduce"]
    return (
        rf"the ops differ\): rank {{me}} submitted {kinds[rank]} #\d+ \(count 4096.*rank {{peer}} submitted "
        rf"{kinds[1 - rank]} #\d+"
    )


def check_compound(world: pycomm.Communicator) -> None:
    r = world.rank
    n = [1000, 2000][r]
    both_ranks(
        world,
        "allreduce_quantized sizes",
        lambda c: c.allreduce_quantized(torch.ones(n), op=pycomm.AVG, async_op=True).wait(),
        r"allreduce_quantized \(" + str(n) + r" x torch.float32.*failed: .*sizes differ.*rank {me} submitted "
        r"allreduce_quantized #\d+ \(count " + str(n),
    )

    both_ranks(world, "allreduce_quantized vs allreduce", quantized_or_plain, quantized_or_plain_pattern(r))
    sizes = [[100, 200], [100, 300]][r]
    both_ranks(
        world,
        "allreduce_coalesced sizes",
        lambda c: c.allreduce_coalesced([torch.ones(k) for k in sizes], op=pycomm.SUM, async_op=True).wait(),
        r"allreduce_coalesced \(2 tensors.*\(bucket 0 of 1\) failed: .*sizes differ",
    )


def check_released_while_peer_keeps_its_own(world: pycomm.Communicator) -> None:
    """gloo: a communicator broken by a mismatch posts nothing of the ops queued behind it (here rank 0's
    split after its allreduce_quantized's op matching), so its groups are released at once even while rank
    1 keeps its own open. A signature exchange posted on one rank only stayed in gloo until gloo's timeout,
    and the group holding it could not be released before: collecting it froze rank 0's whole process
    (GIL held) for PYCOMM_TIMEOUT each, while rank 1 waited for it in the next op and timed out."""
    # two of them: the old freeze (2 x PYCOMM_TIMEOUT) outlasts rank 1's wait whichever rank arrives first
    kept = [
        both_ranks(
            world,
            f"allreduce_quantized vs allreduce ({i} of 2 kept)",
            quantized_or_plain,
            quantized_or_plain_pattern(world.rank),
        )
        for i in (1, 2)
    ]
    if world.rank == 0:
        kept.clear()
        gc.collect()  # the broken communicators are garbage in reference cycles: their groups released here
    world.barrier()
    done("broken communicators released while the peer keeps its own")


def check_p2p(world: pycomm.Communicator) -> None:
    """send 10 / recv 5, and float32 sent to an int32 recv, blocking and async: the receiver names both
    ops and its buffer is untouched; the sender's send completes (its payload was drained)."""
    cases = (
        ("sizes (send 10, recv 5)", torch.ones(10), torch.zeros(5), "sizes differ"),
        (
            "dtypes (float32 to int32)",
            torch.ones(5),
            torch.zeros(5, dtype=torch.int32),
            "dtypes or element counts differ",
        ),
        ("sizes, large (send 8 MiB, recv 4 MiB)", torch.ones(2 * MIB), torch.zeros(MIB), "sizes differ"),
    )
    for case, send_t, recv_t, what in cases:
        for blocking in (True, False):
            sub = fresh(world)
            if sub.rank == 0:
                sub.send(send_t, 1, tag=3) if blocking else sub.isend(send_t, 1, tag=3).wait()
            else:
                recv_dtype = str(recv_t.dtype).replace("torch.", "")
                expect_raises(
                    pycomm.MismatchError,
                    rf"recv #\d+ \(count {recv_t.numel()}, {recv_dtype}.*tag 3\).*matched rank 0's "
                    rf"send #\d+ \(count {send_t.numel()}, float32.*\({what}: the sender's "
                    rf"{send_t.numel()} x float32 vs this recv's {recv_t.numel()} x {recv_dtype}",
                    lambda: sub.recv(recv_t, 0, tag=3) if blocking else sub.irecv(recv_t, 0, tag=3).wait(),
                )
                assert not bool(recv_t.any()), "the mismatched payload was written into the recv buffer"
                expect_raises(pycomm.PycommError, "is broken", lambda: sub.irecv(recv_t, 0, tag=4))
            sub.shutdown()
            done(f"p2p {case}, {'blocking' if blocking else 'async'}")


def check_matching_still_works(world: pycomm.Communicator) -> None:
    """The same ops with matching arguments give the right results (the checks let them through)."""
    t = torch.full((40 * MIB // 4,), float(world.rank + 1))
    world.allreduce(t, op=pycomm.SUM)
    assert bool((t == 3).all())
    got = torch.zeros(10)
    if world.rank == 0:
        world.send(torch.arange(10.0), 1, tag=5)
    else:
        world.recv(got, 0, tag=5)
        assert got.tolist() == list(map(float, range(10)))
    done("matching ops")


def check_one_rank_of_three(world: pycomm.Communicator) -> None:
    """Only rank 2 differs: ranks 0 and 1, which agree with each other, are told too (and by whom)."""
    sub = fresh(world)
    counts = [1000, 1000, 3000]
    me = sub.rank
    other = 0 if me == 2 else 2  # the first rank whose op differs from mine
    expect_raises(
        pycomm.MismatchError,
        rf"rank {me} submitted allreduce #\d+ \(count {counts[me]},.*but rank {other} submitted "
        rf"allreduce #\d+ \(count {counts[other]},",
        lambda: sub.allreduce(torch.ones(counts[me]), op=pycomm.SUM),
    )
    sub.shutdown()
    done("one rank of three")


def main() -> None:
    backend = sys.argv[1] if len(sys.argv) > 1 else "mpi"
    world = pycomm.init(backend=backend)
    if world.size == 3:
        check_one_rank_of_three(world)
        world.barrier()
        print(f"rank {world.rank}: {passed} mismatch cases passed", flush=True)
        pycomm.finalize()
        return
    assert world.size == 2, "run on 2 or 3 ranks"
    checks = [
        check_ring_sizes,
        check_ring_dtypes,
        check_small_collectives,
        check_compound,
        check_p2p,
        check_matching_still_works,
    ]
    if backend == "gloo":
        checks.remove(check_p2p)
        checks.insert(checks.index(check_matching_still_works), check_released_while_peer_keeps_its_own)
    for check in checks:
        check(world)
    world.barrier()
    print(f"rank {world.rank}: {passed} mismatch cases passed", flush=True)
    pycomm.finalize()


if __name__ == "__main__":
    main()
