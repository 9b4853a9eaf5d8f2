"""pycomm's own host broadcast, all-gather and reduce-scatter on MPI point-to-point messages
(tests/comm/workers/p2p_collectives.py): exact results against numpy on 2, 3, 4 and 5 ranks (3 and 5
take the ring, 2 and 4 recursive doubling / halving), every root, dtype and reduce op, sizes either
side of each algorithm switch (the eager limit, PYCOMM_EAGER_BYTES, at its default and at 16 KiB), async
ops mixed with blocking ones, mismatched ops, roots and sizes with the data in op matching, on the
scheduled path and across the eager limit as MismatchError, a peer whose data comes in the wrong size
refused with MismatchError, the tensor untouched; and a rank that never calls gives the others StallError naming it,
on both the fused and the scheduled path of each collective. 3 to 5 ranks on a small machine are
oversubscribed (the broadcast then always takes the binomial tree): PYCOMM_OVERSUBSCRIBED=0 runs its
scatter + all-gather too. One launch per world size runs every settings phase of it, each on a communicator
split under that phase's settings."""

from __future__ import annotations

import functools
import os
import re

import pytest

from tests.comm.rank_reports import assert_every_rank_passed, assert_stall_names_last_rank, run_stalled
from tests.launch import mpirun

# The settings phases each world size's one launch runs (tests/comm/workers/p2p_collectives.py PHASES), one
# after another in the same ranks: a launch costs more than a phase's checks.
PHASES = {
    2: ["default", "window-per-rank"],
    3: ["default", "eager-16k", "dedicated-cores"],
    4: ["default", "dedicated-cores"],
    5: ["default"],
}


@functools.lru_cache(maxsize=None)
def launch(ranks: int) -> str:
    """The stdout of the one launch of `ranks` ranks that runs every phase of PHASES[ranks]."""
    proc = mpirun(
        ranks,
        "tests.comm.workers.p2p_collectives",
        "--phases",
        ",".join(PHASES[ranks]),
        env={"PYCOMM_TIMEOUT": "120", "PYCOMM_OVERSUBSCRIBED": "auto"},
        timeout=300 + 600 * len(PHASES[ranks]),
    )
    return proc.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3, 4, 5])
def test_collectives_against_numpy(ranks):
    stdout = launch(ranks)
    assert_every_rank_passed(stdout, "p2p-collective", ranks, at_least=400)
    # mpirun --bind-to none: every rank may run on this process's CPUs, so they are the node's cores
    crowded = ranks > len(os.sched_getaffinity(0))
    assert_agreed_oversubscribed(stdout, "p2p-collective", ranks, oversubscribed=crowded)


@pytest.mark.mpi
def test_fused_allgather_and_reduce_scatter_on_eight_ranks():
    """8 ranks: three doubling steps of op matching, each carrying only the blocks its peer still needs
    (the all-gather's known groups; the reduce-scatter's halving, strided two levels deep), every dtype and
    op against numpy."""
    proc = mpirun(8, "tests.comm.workers.p2p_collectives", "--fused-only", env={"PYCOMM_TIMEOUT": "120"}, timeout=300)
    assert_every_rank_passed(proc.stdout, "p2p-collective/fused", 8, at_least=40)


@pytest.mark.mpi
def test_collectives_with_another_eager_limit():
    """PYCOMM_EAGER_BYTES=16384 on 3 ranks (the fold of recursive doubling in op matching): every dtype and op
    either side of that limit (the worker reads it), the data riding in op matching up to it, and the
    mismatches on either side of it."""
    assert_every_rank_passed(launch(3), "p2p-collective/eager-16k", 3, at_least=400)


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [3, 4])
def test_collectives_as_on_dedicated_cores(ranks):
    """PYCOMM_OVERSUBSCRIBED=0 on every rank: broadcast's scatter + all-gather runs on a small machine too."""
    stdout = launch(ranks)
    assert_every_rank_passed(stdout, "p2p-collective/dedicated-cores", ranks, at_least=400)
    assert_agreed_oversubscribed(stdout, "p2p-collective/dedicated-cores", ranks, oversubscribed=False)


@pytest.mark.mpi
def test_collectives_with_a_different_window_on_each_rank():
    """Rank 0 alone says its node is oversubscribed, so it keeps every message of a step in flight while
    rank 1 keeps 4 (unless this machine is crowded then): how many messages a rank posts at once is its own
    choice, the messages and their order are the same, so the results stay exact (reduce-scatter's 5 MiB
    blocks are 20 messages a step). The schedules' choice is agreed: both ranks report True."""
    stdout = launch(2)
    assert_every_rank_passed(stdout, "p2p-collective/window-per-rank", 2, at_least=400)
    assert_agreed_oversubscribed(stdout, "p2p-collective/window-per-rank", 2, oversubscribed=True)


def assert_agreed_oversubscribed(stdout: str, label: str, ranks: int, oversubscribed: bool) -> None:
    """Every rank printed its `label` phase communicator's agreed `oversubscribed` flag (what picks the
    broadcast's schedule), and it is the one expected."""
    flags = re.findall(rf"rank (\d+): {re.escape(label)} oversubscribed (True|False|None)", stdout)
    assert sorted(int(r) for r, _ in flags) == list(range(ranks)), stdout
    assert {f for _, f in flags} == {str(oversubscribed)}, stdout


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_missing_rank_gives_stall_error_naming_it(ranks):
    out = run_stalled("p2p_collectives", ranks)
    for kind in ("broadcast", "allgather", "reduce_scatter"):
        for numel in (100, 262144):
            # a one-way broadcast's root stalls in the barrier after it
            op = "(broadcast|barrier)" if kind == "broadcast" else kind
            assert_stall_names_last_rank(out, ranks, f"stall of {kind} {numel}", rf"{op} #\d+ \(count \d+, float32")
