"""Parameter servers across the nodes of the emulated cluster (2 nodes x 2 ranks): the server on node0, a
worker beside it and two on node1. Under mpirun the ranks find each other's addresses themselves (each
listens on its node's address, not loopback) and node1's link carries its two workers' share of the
server's traffic; started as independent processes (no MPI job), as on machines without a shared launcher,
the run survives losing node1: the server names the lost workers and their node and trains on with the
worker left."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from algorithms.ps.ps_settings import ADDRESSES_ENV, RANK_ENV, SECRET_ENV, WORLD_ENV
from benchmarks.cluster import Cluster, hostname
from tests.apps.test_ps_faults import train_args
from tests.cluster.node_loss import job, kill_node, read_until
from tests.launch import ROOT, SECRET, check, worker_env

STEPS = 20  # per worker (under mpirun)
LONG = 3 * STEPS  # per worker where node1 is lost after 20
TIMEOUT = 2  # worker_timeout, s
NO_EVAL = ["-o", "train.eval_every_epochs=100"]  # only the final evaluation
PORT = 29700  # rank r listens on PORT + r on its node (each node is a network namespace of its own)


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_a_server_on_node0_trains_workers_on_both_nodes(cluster: Cluster, tmp_path: Path) -> None:
    before = cluster.link_bytes(1)
    args = train_args(tmp_path, "run", "asyncps", {"worker_timeout": 4}, STEPS) + NO_EVAL
    proc = check(
        subprocess.run(
            [*cluster.mpirun_argv(), sys.executable, "-m", "apps.train", *args],
            cwd=ROOT,
            env=worker_env(),
            capture_output=True,
            text=True,
            timeout=240,
        ),
        "asyncps on 2 nodes",
    )
    assert f"done at version {3 * STEPS}: finished 1, 2, 3, lost none" in proc.stdout, proc.stdout
    server = json.loads((tmp_path / "run" / "train.jsonl").read_text().splitlines()[-1])  # the server's bytes
    into, out_of = (a - b for a, b in zip(cluster.link_bytes(1), before))
    # workers 2 and 3 (node1) carry 2 of the 3 workers' pushes and pulls over the link; all 3 would be on it
    # were the server on node1 with one worker, 1 of 3 with worker 1 there alone
    share = (into + out_of) / server["comm_bytes"]
    assert 0.6 <= share <= 0.75, (into, out_of, server["comm_bytes"])


def independent_on_nodes(cluster: Cluster, argv: list[str]) -> list[tuple[list[str], dict[str, str]]]:
    """(argv, environment) of every rank of an independent launch, rank r on node r // ranks_per_node,
    each told every rank's HOST:PORT by node name (as one would across machines)."""
    addresses = ",".join(f"{hostname(r // cluster.ranks_per_node)}:{PORT + r}" for r in range(cluster.size))
    return [
        (
            [*cluster.enter(r // cluster.ranks_per_node), *argv],
            worker_env({RANK_ENV: str(r), WORLD_ENV: str(cluster.size), ADDRESSES_ENV: addresses, SECRET_ENV: SECRET}),
        )
        for r in range(cluster.size)
    ]


@pytest.mark.timeout(300)
def test_a_parameter_server_run_survives_losing_a_worker_node(cluster: Cluster, tmp_path: Path) -> None:
    # syncps: the server waits for every worker's step, so worker 1 cannot finish before node1's loss is noticed
    args = train_args(tmp_path, "run", "syncps", {"worker_timeout": TIMEOUT}, LONG) + NO_EVAL
    tasks = independent_on_nodes(cluster, [sys.executable, "-u", "-m", "apps.train", *args])
    with job(*tasks[0]) as server, job(*tasks[1]) as worker:
        others = [
            subprocess.Popen(a, cwd=ROOT, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for a, e in tasks[2:]
        ]
        try:
            text = read_until(server, "step 20/")  # node1's workers are training
            assert len(kill_node(cluster, 1, "apps.train")) == 2, text
            text += server.communicate(timeout=200)[0]
            worker_text = worker.communicate(timeout=60)[0]
        finally:
            for p in others:
                p.kill()
                p.wait()
    assert server.returncode == 0 and worker.returncode == 0, text + worker_text
    for w in (2, 3):  # named with the node they ran on
        assert re.search(
            rf"worker {w} lost: no message for [\d.]+ s \(worker_timeout={TIMEOUT} s\), on node1; "
            r"continuing with 1\b",
            text,
        ), text
    # the server went on with worker 1 after losing node1: rounds logged after the loss, to the run's end
    after = text[text.index("lost: no message for") :]
    assert re.search(r"step [3-9]\d/", after) and f"worker 1 finished at step {LONG}" in after, text
    assert f"done at version {LONG}: finished 1, lost 2, 3" in after, text  # syncps: a version per round
    assert re.search(r"workers finished: 1; lost: 2 \(no message for [^;]*, on node1\), 3 \(", text), text
