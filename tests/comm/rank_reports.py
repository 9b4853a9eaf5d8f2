"""What the p2p workers print, read back by their tests: every rank's count of passed checks, and the
StallError each rank that did call reports when the last rank never does (their --stall run)."""

from __future__ import annotations

import re

from tests.launch import mpirun


def assert_every_rank_passed(stdout: str, label: str, ranks: int, at_least: int) -> None:
    """Each of `ranks` printed "rank R: N <label> checks passed" with N > at_least."""
    passed = re.findall(rf"rank (\d+): (\d+) {label} checks passed", stdout)
    assert sorted(int(r) for r, _ in passed) == list(range(ranks)), stdout
    assert all(int(n) > at_least for _, n in passed), stdout


def assert_stall_names_last_rank(out: str, ranks: int, mark: str, op: str, timeout: str = "3") -> None:
    """Every rank but the last printed "MARK rank R <mark> after S s: <msg>", where msg starts with the
    regex `op`, names the last rank as the one waited for, and names PYCOMM_TIMEOUT."""
    last = ranks - 1
    for r in range(last):
        m = re.search(rf"MARK rank {r} {mark} after [\d.]+ s: (.*)", out)
        assert m, out
        msg = m.group(1)
        assert re.match(op, msg), msg
        waiting = re.search(r"waiting for ranks? ([\d, ]+):", msg)
        assert waiting and waiting.group(1) == str(last), msg
        assert f"PYCOMM_TIMEOUT={timeout}" in msg, msg


def run_stalled(worker: str, ranks: int) -> str:
    """The output of `worker` (a tests.comm.workers module) with --stall and PYCOMM_TIMEOUT=3 on `ranks`
    ranks, the last of which skips the ops the others stall in; every rank must still finish (MARK done)."""
    proc = mpirun(
        ranks, f"tests.comm.workers.{worker}", "--stall", env={"PYCOMM_TIMEOUT": "3"}, expect_ok=False, timeout=900
    )
    out = proc.stdout + proc.stderr
    assert all(f"MARK rank {r} done" in out for r in range(ranks)), out
    return out
