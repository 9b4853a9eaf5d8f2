"""PYCOMM_PROFILE_STARTUP: the phase lines of real ranks (a 2-rank script under mpirun), their reader and
`python -m pycomm.startup_report`, bad values, and benchmarks/startup.py's output. No timing thresholds:
the phases are checked for presence, order and form, never for how long they took."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pycomm import startup_profile
from pycomm.startup_profile import ENV, PROCESS_START
from pycomm.startup_report import ProfileError, read
from tests.launch import ROOT, mpirun, worker_env

SCRIPT_PHASES = [
    PROCESS_START,
    "main_start",
    "torch_imported",
    "pycomm_imported",
    "mpi_init",
    "init",
    "first_allreduce",
]
LINE_KEYS = {"phase", "t", "pid", "launcher", "rank", "size"}


def _check_lines(path: Path) -> None:
    for line in path.read_text().splitlines():
        record = json.loads(line)
        assert set(record) == LINE_KEYS, record
        assert isinstance(record["t"], float) and record["t"] > 0


@pytest.mark.mpi
def test_two_rank_script_profile(tmp_path: Path) -> None:
    profile = tmp_path / "startup.jsonl"
    mpirun(2, "benchmarks.workers.startup_pycomm", env={ENV: str(profile)})
    _check_lines(profile)
    processes = read(profile)
    assert sorted(p.label for p in processes) == ["rank 0", "rank 1"]
    for p in processes:
        assert (p.launcher, p.size) == ("openmpi", 2)
        assert [ph.name for ph in p.phases] == SCRIPT_PHASES  # read() orders by time: this is the real order
        assert all(ph.seconds >= 0 for ph in p.phases) and p.phases[0].seconds == 0
    shown = subprocess.run(
        [sys.executable, "-m", "pycomm.startup_report", str(profile)],
        cwd=ROOT,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert "rank 0 (pid" in shown.stdout and "rank 1 (pid" in shown.stdout
    assert shown.stdout.count("first_allreduce") == 2


def test_mark_writes_the_process_start_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = tmp_path / "p.jsonl"
    monkeypatch.setattr(startup_profile, "_path", str(profile))
    monkeypatch.setattr(startup_profile, "_started", set())
    startup_profile.mark("one")
    startup_profile.mark("two", at=startup_profile.time.time())
    _check_lines(profile)
    (p,) = read(profile)
    assert [ph.name for ph in p.phases] == [PROCESS_START, "one", "two"] and p.label == "main"
    with pytest.raises(ValueError, match="phase must be a non-empty str"):
        startup_profile.mark("")
    with pytest.raises(TypeError, match="at must be a time.time.. value"):
        startup_profile.mark("three", at="now")


def test_off_when_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setattr(startup_profile, "_path", startup_profile._UNSET)
    assert not startup_profile.enabled()
    startup_profile.mark("nothing")  # no file to write: returns


def test_a_directory_is_refused_naming_the_variable() -> None:
    """(A path in a missing directory is refused too: tests/comm/test_settings.py's garbage values.)"""
    value = "."
    p = subprocess.run(
        [sys.executable, "-c", "import pycomm"],
        cwd=ROOT,
        env=worker_env({ENV: value}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode != 0
    assert f"{ENV}={value!r} is not valid: expected the path of a file in an existing directory" in p.stderr


def test_malformed_profile_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"phase":"a","t":1.0,"pid":1,"launcher":"single","rank":0,"size":1}\nnot json\n')
    with pytest.raises(ProfileError, match=r"bad.jsonl:2: not a start-up profile line"):
        read(bad)
    shown = subprocess.run(
        [sys.executable, "-m", "pycomm.startup_report", str(bad)],
        cwd=ROOT,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 2 and "bad.jsonl:2" in shown.stderr


@pytest.mark.mpi
def test_startup_benchmark_output(tmp_path: Path) -> None:
    """benchmarks/startup.py on the script case and both peers, once: every row has its phases per rank,
    the ratios and goals are there, and the JSON and PNG are written."""
    from benchmarks import startup

    payload = startup.main(["--repeats", "1", "--cases", "script", "mpi4py", "gloo", "--results-dir", str(tmp_path)])
    doc = json.loads((tmp_path / "startup.json").read_text())
    assert (tmp_path / "startup.png").stat().st_size > 0
    assert [r["case"] for r in doc["rows"]] == ["script", "mpi4py", "gloo"]
    for row in doc["rows"]:
        assert sorted(row["phases"]) == ["rank 0", "rank 1"], row["case"]
        for phases in row["phases"].values():
            assert next(iter(phases)) == startup.LAUNCH and list(phases)[-1] == "first_allreduce"
        assert row["total_s"] > 0 and row["init_plus_first_s"] > 0 and len(row["totals"]) == 1
    assert list(doc["rows"][0]["phases"]["rank 0"]) == [startup.LAUNCH, *SCRIPT_PHASES[1:]]
    assert set(payload["ratios"]) == {"script_vs_mpi4py", "script_vs_gloo"}
    assert [g["goal"] for g in payload["goals"]] == ["pycomm.init() + first all-reduce < 1 s (2 ranks, mpirun)"]
