"""The single-node SLURM of tests/slurm.py: real srun --mpi=pmix steps, failure reporting, clean teardown."""

from __future__ import annotations

import re
import socket

import pytest

from tests.slurm import SlurmCluster, slurm_missing_reason

pytestmark = pytest.mark.slurm


@pytest.mark.parametrize("n", [2, 4])
def test_srun_pmix_mpi_world_matches_slurm_step(slurm: SlurmCluster, n: int) -> None:
    out = slurm.srun(n, "tests.infra.workers.slurm_mpi", str(n), timeout=180).stdout
    # Tasks' output can interleave mid-line: match the reports, not whole lines.
    assert sorted(re.findall(r"task (\d+/\d+) ok", out)) == [f"{r}/{n}" for r in range(n)], out


def test_srun_reports_a_failing_task(slurm: SlurmCluster) -> None:
    proc = slurm.srun(2, "tests.infra.workers.exit_code", "1", "3", mpi="none", timeout=120, expect_ok=False)
    assert proc.returncode != 0
    assert "task 1 failing on purpose" in proc.stdout
    with pytest.raises(AssertionError, match="exited with"):
        slurm.srun(2, "tests.infra.workers.exit_code", "0", "5", mpi="none", timeout=120)


def test_cluster_starts_and_tears_down_cleanly() -> None:
    reason = slurm_missing_reason()
    if reason:
        pytest.skip(reason)
    cluster = SlurmCluster().start()
    procs = dict(cluster.procs)
    assert cluster.running()
    print(f"SLURM test cluster started in {cluster.start_seconds:.2f}s")
    cluster.stop()
    assert all(p.poll() is not None for p in procs.values()), {n: p.poll() for n, p in procs.items()}
    assert not cluster.dir.exists()
    for daemon, port in cluster.ports.items():
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"{daemon} still listens on port {port}"
