"""scripts/test.sh runs the suite as two pytest processes at once (tests/conftest.py's `--part`): every test is in
exactly one part, the ranks part holds every test that starts ranks (the `mpi` and `slurm` markers, tests/cluster,
whose emulated cluster must not run twice at once) and nothing else. Checked on pytest's own collection of files
that mix marked and unmarked tests."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.launch import ROOT

FILES = [
    "tests/apps/test_checkpoint.py",  # mpi-marked tests beside unmarked ones
    "tests/infra/test_slurm.py",  # slurm, by the module's pytestmark
    "tests/cluster/test_cluster.py",  # the emulated cluster
    "tests/infra/test_first_contact.py",  # none of them
]


def collected(*options: str) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *options, *FILES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {line for line in proc.stdout.splitlines() if re.match(r"tests/\S+::", line)}


@pytest.fixture(scope="module")
def parts() -> dict[str, set[str]]:
    return {"all": collected(), "ranks": collected("--part", "ranks"), "rest": collected("--part", "rest")}


def test_every_test_is_in_exactly_one_part(parts: dict[str, set[str]]) -> None:
    assert parts["ranks"] and parts["rest"], parts
    assert not parts["ranks"] & parts["rest"], parts["ranks"] & parts["rest"]
    assert parts["ranks"] | parts["rest"] == parts["all"], parts["all"] ^ (parts["ranks"] | parts["rest"])


def test_the_ranks_part_holds_what_starts_ranks(parts: dict[str, set[str]]) -> None:
    ranks, rest = parts["ranks"], parts["rest"]
    assert {t for t in parts["all"] if t.startswith(("tests/cluster/", "tests/infra/test_slurm.py"))} <= ranks
    assert "tests/apps/test_checkpoint.py::test_a_corrupt_per_rank_file_stops_every_rank_at_resume" in ranks
    assert "tests/apps/test_checkpoint.py::test_saving_a_step_again_replaces_it_and_keeps_links_of_others_valid" in rest
    assert {t for t in parts["all"] if t.startswith("tests/infra/test_first_contact.py")} <= rest


def test_an_unknown_part_is_refused_naming_the_parts() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "--part", "gpu", FILES[-1]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0 and "'ranks'" in proc.stderr and "'rest'" in proc.stderr, proc.stderr
