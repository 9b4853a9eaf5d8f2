"""Provoked faults on real ranks: a skipped collective (or allreduce_quantized) becomes a StallError
after one PYCOMM_TIMEOUT (no hang) naming the rank that has not reached it, PYCOMM_DEBUG=1 names both ranks' ops when they differ, and
pycomm.abort on one rank ends the whole job at once."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

import pycomm
from tests.comm.test_single_process import run_python
from tests.launch import mpirun, torchrun


def run_stall_on_two_ranks(case: str, env: dict[str, str]) -> tuple[str, float, str]:
    """The faults worker's `case` on 2 ranks, both of which must get past the stall (MARK done): the
    output, how long the stalled op waited (s) and the StallError it raised."""
    proc = mpirun(2, "tests.comm.workers.faults", case, env=env, expect_ok=False, timeout=240)
    out = proc.stdout + proc.stderr
    assert "MARK rank 0 done" in out and "MARK rank 1 done" in out, out
    m = re.search(r"MARK stall after ([\d.]+) s: (.*)", out)
    assert m, out
    return out, float(m.group(1)), m.group(2)


def stalls_waiting_for_rank_2(out: str) -> list[str]:
    """A 3-rank job in which rank 2 stalls: every rank got past it (MARK done), and ranks 0 and 1 each
    reported a stall waiting for rank 2 alone; their messages."""
    assert all(f"MARK rank {r} done" in out for r in range(3)), out
    messages = []
    for r in (0, 1):
        m = re.search(rf"MARK rank {r} stall after [\d.]+ s: (.*)", out)
        assert m, out
        waiting = re.search(r"waiting for ranks? ([\d, ]+):", m.group(1))
        assert waiting and waiting.group(1) == "2", m.group(1)  # rank 2, neither rank 0 nor rank 1
        messages.append(m.group(1))
    return messages


@pytest.mark.mpi
@pytest.mark.parametrize(
    "nonblocking,inline_bytes",
    [("0", "0"), ("1", "0"), ("0", "1048576")],
    ids=["queued-blocking-collectives", "queued-nonblocking-collectives", "on-caller-thread"],
)
def test_skipped_collective_raises_stall_error_within_timeout(nonblocking, inline_bytes):
    """The stalled all-reduce (4000 bytes, async_op=False) runs on the progress thread, with blocking
    or nonblocking MPI calls, or on the caller's thread (PYCOMM_INLINE_BYTES allows it there)."""
    t0 = time.perf_counter()
    env = {"PYCOMM_TIMEOUT": "5", "PYCOMM_MPI_NONBLOCKING": nonblocking, "PYCOMM_INLINE_BYTES": inline_bytes}
    out, waited, msg = run_stall_on_two_ranks("stall", env)
    assert waited >= 4.9, out  # it waited the timeout, not less
    assert "allreduce #2" in msg and "count 1000" in msg and "4000 bytes" in msg, msg
    assert "PYCOMM_TIMEOUT=5" in msg and "did not complete" in msg, msg
    assert re.search(r"MARK broken: barrier: the mpi communicator \(rank 0 of 2\) is broken", out), out
    assert time.perf_counter() - t0 < 200


@pytest.mark.mpi
@pytest.mark.parametrize("inline_bytes", ["0", "1048576"], ids=["queued", "on-caller-thread"])
def test_stall_error_names_the_rank_that_has_not_reached_the_op(inline_bytes):
    """3 ranks, rank 2 sleeps instead of calling allreduce #2: ranks 0 and 1 wait for rank 2 alone, and
    read where it is (its latest collective, allreduce #1) without its help (transport/mpi/progress_window)."""
    env = {"PYCOMM_TIMEOUT": "2", "PYCOMM_INLINE_BYTES": inline_bytes}
    proc = mpirun(3, "tests.comm.workers.faults", "missing_rank", env=env, expect_ok=False, timeout=240)
    for msg in stalls_waiting_for_rank_2(proc.stdout + proc.stderr):
        assert msg.startswith("allreduce #2 (count 1000, float32, 4000 bytes, op SUM)"), msg
        assert "rank 2 has not reached allreduce #2 (its latest collective is allreduce #1)" in msg, msg


@pytest.mark.mpi
def test_skipped_quantized_allreduce_raises_after_one_timeout():
    """It used to raise after 2x PYCOMM_TIMEOUT (its pipeline waited for a second transfer after the
    first stalled) and named an internal op."""
    env = {"PYCOMM_TIMEOUT": "10"}
    out, waited, msg = run_stall_on_two_ranks("quantized_stall", env)
    assert 9.9 <= waited < 17, out  # one timeout (10 s) plus slack on a loaded machine; 2x would be 20 s
    assert msg.startswith("allreduce_quantized (65536 x torch.float32"), msg
    assert re.search(r"allreduce_quantized #\d+ \(count 65536, float32", msg) and "PYCOMM_TIMEOUT=10" in msg, msg


@pytest.mark.mpi
@pytest.mark.parametrize("inline_bytes", ["0", "1048576"], ids=["queued", "on-caller-thread"])
def test_mismatched_sizes_under_debug_name_both_ops(inline_bytes):
    env = {"PYCOMM_DEBUG": "1", "PYCOMM_INLINE_BYTES": inline_bytes}
    proc = mpirun(2, "tests.comm.workers.faults", "mismatch", env=env)
    out = proc.stdout
    for r, other in ((0, 1), (1, 0)):
        m = re.search(rf"MARK rank {r} mismatch: (.*)", out)
        assert m, out
        msg = m.group(1)
        mine, theirs = 10 + 2 * r, 10 + 2 * other
        assert f"rank {r} submitted allreduce #1 (count {mine}, float32" in msg, msg
        assert f"rank {other} submitted allreduce #1 (count {theirs}, float32" in msg, msg
        assert re.search(rf"MARK rank {r} broken: .*is broken", out), out


@pytest.mark.mpi
def test_abort_on_one_rank_ends_the_job_with_its_exit_code():
    """Rank 0 waits in an all-reduce rank 1 never joins (PYCOMM_TIMEOUT=120 from worker_env): without
    MPI_Abort it would wait 120 s; the job must end within 10 s of rank 1's abort."""
    proc = mpirun(2, "tests.comm.workers.faults", "abort", expect_ok=False, timeout=240)
    ended = time.time()
    out = proc.stdout + proc.stderr
    m = re.search(r"MARK rank 1 aborts at ([\d.]+)", out)
    assert m, out
    assert proc.returncode == 5, out
    assert "MARK rank 1: lost its data" in proc.stderr, out  # the reason, as given
    assert "rank 0 was not stopped" not in out, out
    assert ended - float(m.group(1)) < 10, out


def test_abort_alone_exits_with_the_code_and_the_reason():
    proc = run_python(
        "import pycomm; pycomm.init(); print('before', flush=True); pycomm.abort('gone', 7); print('after')"
    )
    assert proc.returncode == 7 and proc.stdout == "before\n" and proc.stderr == "gone\n", proc


@pytest.mark.parametrize(
    "reason,code,error",
    [(5, 1, TypeError), ("x", 0, ValueError), ("x", 256, ValueError), ("x", True, ValueError), ("x", "1", ValueError)],
)
def test_abort_rejects_bad_arguments(reason, code, error):
    with pytest.raises(error, match="reason|exit_code"):
        pycomm.abort(reason, code)


# where a rank stopped inside the op shows: gloo's record is not refreshed, MPI's beat stands still
STOPPED = {"gloo": "did not answer within 2 s", "mpi": "stood still for 0.5 s"}


@pytest.mark.parametrize(
    "backend,case", [("gloo", "missing"), ("gloo", "stopped"), pytest.param("mpi", "stopped", marks=pytest.mark.mpi)]
)
def test_stall_names_the_rank_from_its_peers_progress(backend: str, case: str, tmp_path: Path) -> None:
    """3 ranks (gloo under torchrun, MPI under mpirun): rank 2 sleeps instead of calling the all-reduce
    (`missing`), or submits it and is stopped before its peers call it (`stopped`). Ranks 0 and 1 wait for rank
    2 alone and say where it is, from the progress every rank publishes (gloo: pycomm/gloo/progress.py; MPI:
    csrc/transport/mpi/progress_window.h). They used to say `a rank has not reached it` (gloo) and `every
    other rank has reached allreduce #N (one may be stuck inside it)` (MPI). MPI's `missing`:
    test_stall_error_names_the_rank_that_has_not_reached_the_op."""
    launch = torchrun if backend == "gloo" else mpirun
    proc = launch(
        3,
        "tests.comm.workers.stall_progress",
        case,
        str(tmp_path),
        backend,
        env={"PYCOMM_TIMEOUT": "3"},
        expect_ok=False,
        timeout=240,
    )
    for msg in stalls_waiting_for_rank_2(proc.stdout + proc.stderr):
        assert re.match(
            r"allreduce #\d+ \(count 1000, float32, 4000 bytes, op SUM\) (on the mpi communicator "
            r"\(rank \d of 3\) )?did not complete",
            msg,
        ), msg
        op = re.match(r"(allreduce #\d+)", msg).group(1)
        if case == "missing":
            assert re.search(rf"rank 2 has not reached {op} \(its latest collective is allreduce #\d+\)", msg), msg
        else:
            assert re.search(
                rf"rank 2 {STOPPED[backend]} \(its latest collective is allreduce #\d+; its "
                rf"process is stopped or hung, inside {op}\)",
                msg,
            ), msg
