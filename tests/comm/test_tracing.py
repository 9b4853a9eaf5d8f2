"""pycomm.profile() on real ranks (one process, mpirun on 4, torchrun/gloo on 2): each rank's trace holds
exactly the ops the worker issued (names, counts, bytes, consecutive sequence numbers), each op's phases
are nested in it and ordered; the merged trace's sends precede their receives on rank 0's clock, even
when a rank's clock is 5 s off (the ping correction undoes it; without it they would not be ordered);
tracing changes no result (the worker checks). The flight recorder: a forced stall (the last rank skips
an all-reduce) dumps each rank's last op beside the StallError, on MPI and on gloo."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable

import pytest

from pycomm.tracing import merge as trace_merge
from tests.comm.test_single_process import run_python
from tests.launch import mpirun, python, torchrun

PHASE_ORDER = ["queued", "op_check", "wait_peers", "wire"]
SKEW_NS = 5_000_000_000


def ops_of(doc: dict, comm: str = "world") -> list[dict]:
    return sorted(
        (e for e in doc["traceEvents"] if e.get("cat") == "pycomm" and e["args"]["comm"] == comm),
        key=lambda e: e["args"]["seq"],
    )


def check_rank(directory: Path, rank: int, size: int) -> None:
    doc = json.loads((directory / "ranks" / f"rank{rank}.json").read_text())
    assert doc["distributedInfo"]["rank"] == rank and doc["distributedInfo"]["world_size"] == size
    assert doc["pycomm"]["dropped_events"] == 0
    expected = json.loads((directory / f"expected_rank{rank}.json").read_text())
    ops = ops_of(doc)
    got = [dict(name=e["name"], count=e["args"]["count"], bytes=e["args"]["bytes"]) for e in ops]
    assert got == expected, (rank, got)
    seqs = [e["args"]["seq"] for e in ops]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs
    phases = [e for e in doc["traceEvents"] if e.get("cat") == "pycomm.phase"]
    for op in ops:
        assert op["args"]["status"] == "done" and op["args"]["rank"] == rank and op["args"]["size"] == size
        mine = sorted(
            (p for p in phases if p["tid"] == op["tid"] and p["args"]["seq"] == op["args"]["seq"]),
            key=lambda p: p["ts"],
        )
        names = [p["name"] for p in mine]
        assert names[0] == "queued" and "wire" in names, names
        assert names == sorted(names, key=PHASE_ORDER.index), names  # queued, op_check, wait_peers, wire
        end = op["ts"] + op["dur"]
        for p in mine:  # nested in the op (float microseconds: a rounding's slack)
            assert op["ts"] - 1e-3 <= p["ts"] and p["ts"] + p["dur"] <= end + 1e-3, (op, p)
        for a, b in zip(mine, mine[1:]):  # each phase ends where the next begins
            assert abs(a["ts"] + a["dur"] - b["ts"]) < 1e-3, (a, b)
    # the coalesced op: a span with its bucket inside, logical and wire bytes
    spans = {e["name"]: e for e in doc["traceEvents"] if e.get("cat") == "pycomm.span"}
    assert spans["allreduce_coalesced"]["args"]["bytes"] == 60 and spans["bucket"]["args"]["wire_bytes"] == 60


def send_recv_order(doc: dict) -> list[float]:
    """recv end - send start for each flow arrow of a merged trace (microseconds)."""
    starts = {e["id"]: e["ts"] for e in doc["traceEvents"] if e.get("ph") == "s"}
    return [e["ts"] - starts[e["id"]] for e in doc["traceEvents"] if e.get("ph") == "f"]


def clock_error_us(clock: dict) -> float:
    """How far the merge may misplace a receive against its send (microseconds): each rank's times are off by
    at most half the round trip of the ping sample it kept (NTP's bound; the shortest one, at the start and at
    the end), and an arrow joins two ranks. On a loaded machine a round trip can take a millisecond."""
    halves = [
        min(t1 - t0 for t0, _, t1 in samples) / 2 for table in clock.values() for samples in table.values() if samples
    ]
    return 2 * max(halves, default=0.0) / 1e3


def check_merged(directory: Path, size: int, tmp_path: Path) -> None:
    doc = json.loads((directory / "trace.json").read_text())
    assert doc["pycomm"]["merged"]["ranks"] == size
    assert {e["pid"] for e in doc["traceEvents"] if e.get("cat") == "pycomm"} == set(range(size))
    gaps, error = send_recv_order(doc), clock_error_us(doc["pycomm"]["clock"])
    assert len(gaps) == (size if size > 1 else 1) and all(g >= -error for g in gaps), (gaps, error)
    if size == 1:
        return
    # rank 1's clock 5 s ahead: its events and its ping answers shifted alike; the merge undoes it
    skewed = tmp_path / "skewed"
    (skewed / "ranks").mkdir(parents=True)
    for r in range(size):
        d = json.loads((directory / "ranks" / f"rank{r}.json").read_text())
        if r == 1:
            for e in d["traceEvents"]:
                if "ts" in e and e.get("ph") != "M":
                    e["ts"] += SKEW_NS / 1e3
        (skewed / "ranks" / f"rank{r}.json").write_text(json.dumps(d))
    clock = doc["pycomm"]["clock"]
    clock = {
        when: {r: [[t0, tr + (SKEW_NS if r == "1" else 0), t1] for t0, tr, t1 in s] for r, s in table.items()}
        for when, table in clock.items()
    }
    files = [skewed / "ranks" / f"rank{r}.json" for r in range(size)]
    trace_merge.merge(files, skewed / "trace.json", clock, print)
    corrected = send_recv_order(json.loads((skewed / "trace.json").read_text()))
    assert all(g >= -error for g in corrected), (corrected, error)
    trace_merge.merge(files, skewed / "uncorrected.json", {}, print)
    uncorrected = send_recv_order(json.loads((skewed / "uncorrected.json").read_text()))
    assert any(g < -error for g in uncorrected), (uncorrected, error)  # 5 s of skew, far past the bound


def check_stall(out: str, directory: Path, size: int) -> None:
    """The flight recorder's report of the last rank skipping the all-reduce after `seq`."""
    seq = {r: int(re.search(rf"MARK rank {r} last joint seq (\d+)", out).group(1)) for r in range(size)}
    m = re.search(r"MARK rank 0 stall: (.*)", out)
    assert m and all(f"MARK rank {r} done" in out for r in range(size)), out
    msg = m.group(1)
    assert f"Flight recorder: {directory / 'flight.json'}" in msg, msg
    assert f"rank 0: allreduce #{seq[0] + 1} on world (" in msg, msg  # stuck in it
    assert f"rank {size - 1}: allreduce #{seq[size - 1]} on world (done), latest recv" in msg, msg  # never reached it
    dump = json.loads((directory / "flight.json").read_text())
    assert dump["no_answer"] == [] and dump["stalled_comm"] == "world", dump["no_answer"]
    last = dump["ranks"][str(size - 1)]["last_op_on_stalled_comm"]
    assert (last["name"], last["seq"], last["status"], last["count"], last["bytes"]) == (
        "allreduce",
        seq[size - 1],
        "done",
        1000,
        4000,
    )
    stuck = dump["ranks"]["0"]["last_op_on_stalled_comm"]
    assert (stuck["seq"], stuck["status"]) == (seq[0] + 1, "in flight"), stuck


def test_trace_of_one_process(tmp_path: Path) -> None:
    python("tests.comm.workers.tracing", str(tmp_path))
    check_rank(tmp_path, 0, 1)
    check_merged(tmp_path, 1, tmp_path)


def test_pycomm_trace_traces_an_unmodified_program(tmp_path: Path) -> None:
    """PYCOMM_TRACE=DIR: from pycomm.init() to exit, no pycomm.profile() in the program; a profile()
    inside it is refused naming PYCOMM_TRACE."""
    code = (
        "import torch, pycomm\n"
        "comm = pycomm.init()\n"
        "[comm.allreduce(torch.ones(8), op=pycomm.AVG) for _ in range(3)]\n"
        "try:\n    pycomm.profile('elsewhere').start()\nexcept RuntimeError as e:\n    print('MARK', e)\n"
    )
    proc = run_python(code, env={"PYCOMM_TRACE": str(tmp_path / "t")})
    assert proc.returncode == 0 and "traces the whole program" in proc.stdout, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "t" / "trace.json").read_text())
    assert [e["args"]["bytes"] for e in ops_of(doc)] == [32, 32, 32]


def check_traces_and_stall(launcher: Callable[..., Any], ranks: int, tmp_path: Path) -> None:
    """The tracing worker under `launcher` (mpirun, torchrun): each rank's trace, the merged one, and the
    flight recorder's report of the stall it ends with."""
    proc = launcher(
        ranks, "tests.comm.workers.tracing", str(tmp_path), str(tmp_path / "stall"), timeout=240, expect_ok=False
    )
    for r in range(ranks):
        check_rank(tmp_path, r, ranks)
    check_merged(tmp_path, ranks, tmp_path)
    check_stall(proc.stdout + proc.stderr, tmp_path / "stall", ranks)


@pytest.mark.mpi
def test_traces_of_four_mpi_ranks_and_a_stall(tmp_path: Path) -> None:
    # ranks leave with os._exit (the stalled all-reduce never completes): mpirun reports no MPI_Finalize
    check_traces_and_stall(mpirun, 4, tmp_path)


def test_traces_of_two_gloo_ranks_under_torchrun_and_a_stall(tmp_path: Path) -> None:
    check_traces_and_stall(torchrun, 2, tmp_path)
