"""The collectives suite (tests/comm/workers/collectives.py) under each launcher a user may start pycomm.init()
with on CPU ranks, without flags: torchrun (gloo: MPI cannot join its ranks) and plain `python` (one rank,
"local"); mpirun is tests/comm/test_collectives.py, srun (--mpi=pmix and --mpi=none) tests/comm/test_srun.py.
Each asserts the launcher pycomm detected and the backend "auto" chose. Also the gloo transport's own edges
(tests/comm/workers/gloo_edges.py), the fused / quantized / sharded ops on gloo, and launch environments
that cannot work."""

from __future__ import annotations

import re

import pytest

from tests.launch import python, torchrun


def passed_ranks(stdout: str) -> list[tuple[int, int, str, int]]:
    """(rank, size, backend, checks) of every rank's final line of the collectives worker."""
    return sorted(
        (int(r), int(n), b, int(c))
        for r, n, b, c in re.findall(r"rank (\d+)/(\d+) \((\w+)\): (\d+) checks passed", stdout)
    )


def test_collectives_under_torchrun_use_gloo() -> None:
    proc = torchrun(2, "tests.comm.workers.collectives", "--launcher", "torchrun", timeout=600)
    got = passed_ranks(proc.stdout)
    assert [(r, n, b) for r, n, b, _ in got] == [(0, 2, "gloo"), (1, 2, "gloo")], proc.stdout
    assert all(c > 300 for *_, c in got), proc.stdout


def test_collectives_under_plain_python_are_local() -> None:
    proc = python("tests.comm.workers.collectives", "--launcher", "single", timeout=600)
    got = passed_ranks(proc.stdout)
    assert [(r, n, b) for r, n, b, _ in got] == [(0, 1, "local")], proc.stdout
    assert got[0][3] > 300, proc.stdout


def test_gloo_mismatch_stall_and_gpu_errors() -> None:
    proc = torchrun(2, "tests.comm.workers.gloo_edges", env={"PYCOMM_TIMEOUT": "5"}, timeout=300)
    assert sorted(re.findall(r"rank (\d): gloo edges ok", proc.stdout)) == ["0", "1"], proc.stdout


@pytest.mark.parametrize(
    "env,fragment",
    [
        ({"RANK": "1"}, "RANK='1' is set but WORLD_SIZE is not"),
        (
            {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "http"},
            "MASTER_PORT='http' is not a port number",
        ),
        ({"RANK": "0", "WORLD_SIZE": "2"}, "set MASTER_ADDR (rank 0's host) and MASTER_PORT"),
    ],
    ids=["rank-without-world-size", "garbage-master-port", "no-master-addr"],
)
def test_bad_launch_environment_names_the_variable(env: dict[str, str], fragment: str) -> None:
    clean = {"MASTER_ADDR": "", "MASTER_PORT": "", "WORLD_SIZE": "", "LOCAL_RANK": "", **env}
    proc = python("tests.comm.workers.collectives", env=clean, timeout=120, expect_ok=False)
    assert proc.returncode != 0 and fragment in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize(
    "worker,marker",
    [
        ("coalesced", "coalesced ok"),
        ("quantized", "quantized ok"),
        ("flat_shards", "flat shards ok"),
        ("grad_buckets", "grad buckets ok"),
        ("layerwise", "layerwise ok"),
    ],
)
def test_fused_quantized_and_sharded_ops_on_gloo(worker: str, marker: str) -> None:
    """pycomm's compound ops (built on the transport's collectives) run unchanged on gloo under torchrun."""
    proc = torchrun(2, f"tests.comm.workers.{worker}", env={"PYCOMM_TIMEOUT": "120"}, timeout=600)
    assert proc.stdout.count(marker) == 2, proc.stdout


def test_gloo_under_torchrun_with_no_timeout() -> None:
    """PYCOMM_TIMEOUT=0 (no timeout) reaches gloo's rendezvous and process group as their longest bound
    (the store's inf once overflowed datetime.timedelta)."""
    proc = torchrun(2, "tests.comm.workers.layerwise", env={"PYCOMM_TIMEOUT": "0"}, timeout=600)
    assert proc.stdout.count("layerwise ok") == 2, proc.stdout
