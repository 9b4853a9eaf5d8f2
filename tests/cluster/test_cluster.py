"""A real multi-node job on the emulated cluster (benchmarks/cluster.py), 2 nodes x 2 ranks at 1 Gbit/s:
nodes found by host name, Mesh's shard groups inside a node, an all-reduce whose bytes cross the link
between the nodes (its veth's byte counters), gloo rendezvous across nodes under torchrun --nnodes 2 and an
srun-like launch, apps.train HSDP zero2, and losing a node. Skipped with the reason where the cluster cannot
be made (not root, no iproute2, no tc tbf, namespaces refused)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Sequence

import pytest

from benchmarks.cluster import Cluster, leftovers, unavailable
from tests.apps import runs
from tests.cluster.node_loss import LOST_NODE1, job, kill_node, read_until
from tests.launch import ROOT, check, sigint_as_in_a_terminal, worker_env

WORKER = "tests.cluster.workers.nodes"
PAYLOAD = 4 << 20  # bytes all-reduced across the nodes


def run_all(commands: Sequence[tuple[list[str], dict[str, str]]], timeout: float = 120) -> str:
    """Start every (argv, env) at once (the nodes' launchers, or tasks), wait for all; their merged output."""
    procs = [
        subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for argv, env in commands
    ]
    try:
        outs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    text = "\n".join(outs)
    assert all(p.returncode == 0 for p in procs), f"exit codes {[p.returncode for p in procs]}\n{text}"
    return text


def ranks_ok(output: str) -> list[tuple[int, str, str, str]]:
    """(rank, host, backend, launcher) of every rank that passed the nodes worker."""
    return sorted(
        (int(r), h, b, lr) for r, h, b, lr in re.findall(r"rank (\d+)/4 on (\w+) \((\w+), (\w+)\): nodes ok", output)
    )


def expected(backend: str, launcher: str) -> list[tuple[int, str, str, str]]:
    return [(r, f"node{r // 2}", backend, launcher) for r in range(4)]


def assert_crossed(cluster: Cluster, before: tuple[int, int], at_least: int) -> None:
    into, out_of = (a - b for a, b in zip(cluster.link_bytes(1), before))
    assert into >= at_least and out_of >= at_least, (
        f"node1's link carried {into} bytes in and {out_of} out, expected at least {at_least} each way"
    )


@pytest.mark.mpi
def test_mpirun_across_nodes_finds_them_and_allreduces_over_the_link(cluster: Cluster) -> None:
    before = cluster.link_bytes(1)
    proc = subprocess.run(
        [*cluster.mpirun_argv(), sys.executable, "-m", WORKER, "--bytes", str(PAYLOAD)],
        cwd=ROOT,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    check(proc, "mpirun on the emulated cluster")
    assert ranks_ok(proc.stdout) == expected("mpi", "openmpi"), proc.stdout
    assert_crossed(cluster, before, PAYLOAD)


@pytest.mark.mpi
def test_torchrun_multi_node_meets_over_gloo(cluster: Cluster) -> None:
    before = cluster.link_bytes(1)
    out = run_all([(argv, worker_env()) for argv in cluster.torchrun_argvs(["-m", WORKER, "--bytes", str(PAYLOAD)])])
    assert ranks_ok(out) == expected("gloo", "torchrun"), out
    assert_crossed(cluster, before, PAYLOAD)


@pytest.mark.mpi
def test_srun_like_tasks_meet_over_gloo(cluster: Cluster) -> None:
    """Tasks with slurmstepd's variables (no PMI, as srun --mpi=none): rendezvous on the node list's first node."""
    before = cluster.link_bytes(1)
    out = run_all(cluster.srun_tasks([sys.executable, "-m", WORKER, "--bytes", str(PAYLOAD)]))
    assert ranks_ok(out) == expected("gloo", "slurm"), out
    assert_crossed(cluster, before, PAYLOAD)


@pytest.mark.mpi
def test_apps_train_hsdp_zero2_on_two_nodes(cluster: Cluster, tmp_path: Path) -> None:
    before = cluster.link_bytes(1)
    args = runs.args(
        tmp_path,
        "hsdp",
        "zero2",
        4,
        "-o",
        "parallel.dp_replicate=2",
        "-o",
        "parallel.dp_shard=2",
        "-o",
        "train.max_steps=6",
        "-o",
        "checkpoint.every_steps=0",
    )[2:]
    proc = subprocess.run(
        [*cluster.mpirun_argv(), sys.executable, "-m", "apps.train", *args],
        cwd=ROOT,
        env=worker_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    check(proc, "apps.train on the emulated cluster")
    assert "zero2 over 4 rank(s) as pp=1 x dp_replicate=2 x dp_shard=2" in proc.stdout, proc.stdout
    assert "done: 6 steps" in proc.stdout, proc.stdout
    last = json.loads((tmp_path / "hsdp" / "train.jsonl").read_text().splitlines()[-1])
    assert last["step"] == 6 and last["comm_bytes_dp_replicate"] > 0, last
    # dp_shard stays in a node; dp (the initial broadcast) and dp_replicate span both
    assert last["comm_bytes_across_nodes"] == last["comm_bytes_dp"] + last["comm_bytes_dp_replicate"], last
    assert_crossed(cluster, before, last["comm_bytes_dp_replicate"])  # rank 0's own, to its replica on node1


@pytest.mark.mpi
def test_losing_a_node_ends_the_job_naming_it(cluster: Cluster) -> None:
    """Every rank of node1 killed (SIGKILL) mid-job: the job ends within 60 s, naming node1 (and a rank of it)."""
    with job([*cluster.mpirun_argv(), sys.executable, "-m", WORKER, "--hold"], worker_env()) as proc:
        text = read_until(proc, "nodes ok", 4)
        ranks = kill_node(cluster, 1, WORKER)
        assert len(ranks) == 2, f"node1 runs {ranks}, expected its 2 ranks\n{text}"
        text += proc.communicate(timeout=60)[0]
    assert proc.returncode != 0, text
    assert any(re.search(pattern, text) for pattern in LOST_NODE1), text


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["term", "ctrl-c", "hup"])
def test_down_runs_on_a_stop_signal_and_again_harmlessly(sig: int) -> None:
    """A process holding a cluster is stopped by a signal: nothing of the cluster remains; `down` again is
    harmless."""
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    name = f"pct{sig}x{os.getpid() % 1000}"  # one per case: a failed case's leftovers stay its own
    code = (
        f"import time\nfrom benchmarks.cluster import Cluster\nwith Cluster(2, 1, '100mbit', name='{name}'):\n"
        "    print('up', flush=True)\n    time.sleep(120)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=worker_env(),
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_as_in_a_terminal,
    )
    try:
        assert proc.stdout.readline().strip() == "up"  # type: ignore[union-attr]
        assert len(leftovers(name)) >= 3, leftovers(name)  # 2 namespaces, a bridge, the veths
        proc.send_signal(sig)
        assert proc.wait(timeout=60) != 0  # SIGTERM/SIGHUP: 128 + the signal; Ctrl-C: KeyboardInterrupt
    finally:
        if proc.poll() is None:
            proc.kill()
    assert leftovers(name) == []
    check(
        subprocess.run(
            [sys.executable, "-m", "benchmarks.cluster", "down", "--name", name],
            cwd=ROOT,
            env=worker_env(),
            capture_output=True,
            text=True,
            timeout=60,
        ),
        "cluster down",
    )
    assert not Path(f"/etc/netns/{name}n0").exists() and not Path(f"/tmp/pycomm-cluster/{name}").exists()


def test_up_refuses_a_name_in_use_and_leaves_that_cluster_alone() -> None:
    reason = unavailable()
    if reason is not None:
        pytest.skip(reason)
    name = f"pcu{os.getpid() % 100000}"
    with Cluster(1, 1, None, name=name):
        made = leftovers(name)
        with pytest.raises(RuntimeError, match=f"cluster '{name}' exists already .*down --name {name}"):
            Cluster(1, 1, None, name=name).up()
        assert leftovers(name) == made
    assert leftovers(name) == []


@pytest.mark.parametrize(
    "kwargs,words",
    [
        ({"nodes": 0}, "nodes=0: expected a whole number from 1 to 250"),
        ({"ranks_per_node": 0}, "ranks_per_node=0: expected a whole number >= 1"),
        ({"rate": "fast"}, "rate 'fast': expected a tc rate such as 10gbit, 1gbit, 100mbit, or None"),
        ({"name": "Bad-Name"}, "cluster name 'Bad-Name': expected 1-9 lower-case letters"),
    ],
)
def test_bad_cluster_arguments_are_named(kwargs: dict, words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        Cluster(**kwargs)


def test_every_launch_gives_each_rank_its_share_of_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setenv("OMP_NUM_THREADS", "7")  # a caller's setting would oversubscribe the shared cores
    c = Cluster(nodes=2, ranks_per_node=2, rate=None)  # 4 ranks on 8 cores: 2 threads each
    env = c.launch_env({"EXTRA": "1"})
    assert (env["OMP_NUM_THREADS"], env["PYCOMM_NUM_THREADS"], env["EXTRA"]) == ("2", "2", "1")
    tasks = c.srun_tasks([sys.executable, "-c", "pass"])
    assert {(t["OMP_NUM_THREADS"], t["PYCOMM_NUM_THREADS"]) for _, t in tasks} == {("2", "2")}
    assert Cluster(nodes=4, ranks_per_node=4).launch_env()["OMP_NUM_THREADS"] == "1"  # never none
