"""PYCOMM_HUGEPAGES: pycomm's own large host buffers and, through the launchers, the user's tensors get
transparent huge pages; off, neither does. Read back from /proc/self/smaps in real processes."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from apps import launch
from pycomm import hugepages
from tests.launch import ROOT, worker_env

needs_madvise = pytest.mark.skipif(
    hugepages.policy() != "madvise",
    reason=f"the kernel's huge-page policy is {hugepages.policy()!r}: only under "
    "'madvise' does the advice decide which buffers get huge pages",
)

REPORT = "tests.comm.workers.hugepage_report"


def reports(stdout: str) -> list[dict]:
    """The workers' reports, wherever they are: mpirun merges two ranks' output without keeping lines whole
    (CI once got both reports on one line)."""
    rows = [json.loads(m.group(1)) for m in re.finditer(r"HUGEPAGES (\{[^{}]*\})", stdout)]  # flat objects
    assert rows, stdout
    return rows


def report_alone(**env: str) -> dict:
    base = worker_env({"PYCOMM_HUGEPAGES": "1", **env})  # the default, whatever this process was given
    base.pop(hugepages.TORCH_ENV, None)  # this process's own choice must not leak into the check
    proc = subprocess.run(
        [sys.executable, "-m", REPORT], cwd=ROOT, env=base, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return reports(proc.stdout)[0]


@needs_madvise
def test_pool_buffers_get_huge_pages_and_plain_tensors_do_not() -> None:
    r = report_alone()
    assert r["pool_huge_bytes"] >= 4 << 20, r  # at least 2 of the 12 MiB buffer's 5 whole huge pages
    assert r["user_huge_bytes"] == 0, r  # torch's allocator left alone without the launcher's env
    assert r["advise_small"] is False and r["advise_meta"] is False, r


@needs_madvise
def test_switched_off_nothing_is_advised() -> None:
    r = report_alone(PYCOMM_HUGEPAGES="0")
    assert r["pool_huge_bytes"] == 0, r


@needs_madvise
def test_launched_ranks_get_torch_huge_pages_and_exact_collectives() -> None:
    code = f"from apps.launch import spawn; raise SystemExit(spawn(2, [], module={REPORT!r}))"
    env = worker_env({"PYCOMM_HUGEPAGES": "1"})
    env.pop(hugepages.TORCH_ENV, None)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = reports(proc.stdout)
    assert sorted(r["rank"] for r in rows) == [0, 1], rows
    for r in rows:
        assert r["torch_env"] == "1", r
        assert r["user_huge_bytes"] >= 4 << 20 and r["pool_huge_bytes"] >= 4 << 20, r
        assert r["broadcast_ok"] is True, r


@pytest.mark.parametrize(
    "given, want", [({}, "1"), ({hugepages.TORCH_ENV: "0"}, "0"), ({"PYCOMM_HUGEPAGES": "0"}, None)]
)
def test_launcher_environment_keeps_the_users_choice(
    monkeypatch: pytest.MonkeyPatch, given: dict[str, str], want: str | None
) -> None:
    monkeypatch.delenv(hugepages.TORCH_ENV, raising=False)
    monkeypatch.delenv("PYCOMM_HUGEPAGES", raising=False)
    for k, v in given.items():
        monkeypatch.setenv(k, v)
    assert launch.rank_env(2).get(hugepages.TORCH_ENV) == want
