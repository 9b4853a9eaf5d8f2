"""Smoke test of benchmarks/collectives.py --quick: every section runs on real ranks, every peer is
measured and the results file is written. No timing assertions (the machine is shared and noisy)."""

from __future__ import annotations

import json
import subprocess

import pytest

from benchmarks import collectives, shaped_link
from benchmarks.harness import RESULTS
from pycomm import hugepages
from pycomm._quantized_phases import PHASES


def _namespaces() -> list[str]:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.splitlines()


def test_plain_mpirun_keeps_open_mpis_default_binding() -> None:
    assert "--bind-to" not in collectives.mpirun_argv(4, (), bind_to_none=False)
    launchers = collectives.mpirun_argv(4)  # the launchers' own, as before
    assert launchers[launchers.index("--bind-to") + 1] == "none"


def test_merge_keeps_what_the_run_did_not_measure() -> None:
    old = {"small": [{"ranks": 2, "v": "old"}, {"ranks": 4, "v": "old"}], "fusion": [{"ranks": 2, "v": "old"}]}
    rows = {s: [] for s in collectives.SECTIONS}
    rows["small"] = [{"ranks": 2, "v": "new"}]
    got = collectives.merged(rows, old, ["small"], [2])
    assert got["small"] == [{"ranks": 4, "v": "old"}, {"ranks": 2, "v": "new"}]
    assert got["fusion"] == [{"ranks": 2, "v": "old"}]  # a section this run did not measure
    assert set(got) == set(collectives.SECTIONS) and got["busbw"] == []


@pytest.mark.mpi
def test_collectives_benchmark_quick() -> None:
    name = "collectives_smoke"
    try:
        payload = collectives.main(["--ranks", "2", "--quick", "--name", name, "--timeout", "900"])
        doc = json.loads((RESULTS / f"{name}.json").read_text())
        assert (RESULTS / f"{name}.png").stat().st_size > 0
    finally:
        for ext in ("json", "png"):
            (RESULTS / f"{name}.{ext}").unlink(missing_ok=True)
    assert doc["quick"] is True and doc["ranks"] == [2]
    assert {r["peer"] for r in payload["busbw"]} == {"pycomm", "mpi4py", "gloo"}
    assert all(r["busbw_GBs"] > 0 for r in payload["busbw"])
    cases = {r["case"] for r in payload["fusion"]}
    assert {
        "per_tensor_pycomm",
        "per_tensor_pycomm_blocking",
        "per_tensor_gloo",
        "coalesced_pycomm",
        "flat_mpi4py",
    } <= cases
    assert all(r["tensors"] == 161 and r["bytes"] == 4 * 25_557_032 for r in payload["fusion"])
    sent = {r["codec"]: r["bytes_sent_per_rank"] for r in payload["quantized"]}
    assert set(sent) == {"fp32", "int8", "1bit"} and all(v > 0 for v in sent.values())
    # bytes are counted, not timed: these hold on any machine
    assert sent["int8"] <= 0.3 * sent["fp32"] and sent["1bit"] <= 0.05 * sent["fp32"]
    assert {g["goal"] for g in payload["goals"]} >= {"int8 bytes <= 0.3x fp32", "busbw vs gloo >= 1"}
    # the small-message section: four collectives against mpi4py, idle, with every core busy, and on huge pages
    huge = hugepages.policy() == "madvise"
    loads = ("idle", "busy") + ((collectives.HUGEPAGES_LOAD, collectives.PAIRED_LOAD) if huge else ())
    small = {(r["load"], r["op"], r["peer"]) for s in collectives.SMALL_SECTIONS for r in payload[s]}
    assert small == {
        (load, op, peer)
        for load in loads
        for peer in ("pycomm", "mpi4py")
        for op in ("allreduce", "broadcast", "allgather", "reduce_scatter")
    }
    assert {g["goal"] for g in payload["goals"]} >= {"allreduce busbw vs mpi4py >= 1.0 (busy)"}
    assert not any(collectives.PAIRED_LOAD in g["goal"] for g in payload["goals"])
    # under a plain mpirun (default binding): both call patterns, every collective against mpi4py, each size
    plain = {(r["pattern"], r["op"], r["peer"], r["bytes"]) for r in payload["plain"]}
    assert plain == {
        (pattern, op, peer, nbytes)
        for pattern in collectives.PATTERNS
        for peer in ("pycomm", "mpi4py")
        for op in ("allreduce", "broadcast", "allgather", "reduce_scatter")
        for nbytes in collectives.PLAIN_QUICK_SIZES
    }
    assert all(r["load"] == collectives.PLAIN_LOAD and r["seconds"]["median"] > 0 for r in payload["plain"])
    isolated = [r for r in payload["plain"] if r["pattern"] == "isolated"]
    assert all(r["seconds"]["inner"] == 1 and r["seconds"]["repeats"] >= 5 for r in isolated)
    assert {g["goal"] for g in payload["goals"]} >= {
        f"{op} vs mpi4py >= 0.9 (plain mpirun, {pattern})"
        for op in ("allreduce", "broadcast")
        for pattern in collectives.PATTERNS
    }
    # the eager limit's sweep: pycomm on a communicator per PYCOMM_EAGER_BYTES value, mpi4py beside each
    limits = collectives.EAGER_LIMITS[:2]
    eager = {(r["eager_bytes"], r["pattern"], r["peer"], r["bytes"]) for r in payload["eager"]}
    assert eager == {
        (limit, pattern, peer, nbytes)
        for limit in limits
        for pattern in collectives.PATTERNS
        for peer in ("pycomm", "mpi4py")
        for nbytes in limits
    }
    assert {(r["eager_bytes"], r["pattern"]) for r in payload["eager_summary"]} == {
        (limit, pattern) for limit in limits for pattern in collectives.PATTERNS
    }
    # 4 KiB pages are 4 KiB pages whatever this process's environment (the quick sizes stay below a huge page)
    assert all(r["huge_page_bytes"] == 0 for s in collectives.SMALL_SECTIONS for r in payload[s])
    if huge:
        speedup = {(r["op"], r["peer"], r["bytes"]) for r in payload["hugepage_speedup"]}
        assert speedup == {(r["op"], r["peer"], r["bytes"]) for r in payload["small"]}
        assert all(r["speedup"] > 0 for r in payload["hugepage_speedup"])
    else:
        assert payload["small_hugepages"] == [] and "hugepage_speedup" not in payload
    # the shaped link runs where namespaces can be made (root with the capabilities), else says why not
    if shaped_link.unavailable() is None:
        shaped = {r["codec"]: r["bytes_sent_per_rank"] for r in payload["quantized_shaped"]}
        assert set(shaped) == {"fp32", "int8", "1bit"} and shaped["int8"] <= 0.3 * shaped["fp32"]
        phased = [r for r in payload["quantized_shaped"] if r["codec"] != "fp32"]
        assert all(set(r["phase_seconds"]) == set(PHASES) and len(r["timeline_ms"]) == 2 for r in phased)
        assert all(r["link_floor_s"] > 0 for r in payload["quantized_shaped"])
        assert {g["goal"] for g in payload["goals"]} >= {"int8 time <= 0.4x fp32 at 10gbit"}
        roof = payload["roofline"]
        assert {(r["codec"], r["bytes"]) for r in roof["rows"]} == {(r["codec"], r["bytes"]) for r in phased}
        assert all(
            r["memory_floor_s"] > 0 and r["floor_ratio_serial"] >= r["floor_ratio_overlapped"] > 0 for r in roof["rows"]
        )
        assert all(v["read"] > 0 for v in roof["bandwidth_GBs_per_process"].values())
        assert not any(line.startswith("pycomm-bench-") for line in _namespaces()), "namespace left behind"
    else:
        assert payload["quantized_shaped"] == []
