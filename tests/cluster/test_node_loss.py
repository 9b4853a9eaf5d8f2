"""A node lost mid-training on the emulated cluster (2 nodes x 2 ranks): apps.train's mbsgd run loses every
rank of node1 to SIGKILL; the job ends within 60 s naming node1, and `--resume auto` on node0 alone (2 ranks)
continues from the last checkpoint at the same point of the data (the checkpoint's position in samples, taken
in steps of the smaller global batch) and trains to the run's end. Under torchrun (gloo), where the broken
connection names only the peer's address, the survivors' error names node1 and its ranks."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.cluster import Cluster
from tests.apps import runs
from tests.cluster.node_loss import LOST_NODE1, job, kill_node, read_until
from tests.launch import ROOT, check, worker_env

STEPS, EVERY, KILLED_AT = 20, 5, 15  # steps of the 4-rank run, its checkpoints, the step node1 dies after
SAVED = 10  # the last checkpoint before it (a step is saved after its hold)
BATCH, SEGMENT = 32, 1000  # samples per rank and step; per segment (runs.SMALL)


def position(step: int, ranks: int) -> tuple[int, int]:
    """(segment, sample in it) after `step` steps on `ranks` ranks: a segment holds whole global batches
    (apps.data.ShardPlan: the remainder of a segment is not trained on)."""
    per_segment = SEGMENT // (BATCH * ranks)
    return step // per_segment, step % per_segment * BATCH * ranks


@pytest.mark.mpi
@pytest.mark.timeout(400)
def test_losing_node1_mid_training_then_node0_resumes_alone(cluster: Cluster, tmp_path: Path) -> None:
    args = runs.args(
        tmp_path,
        "lose",
        "mbsgd",
        4,
        "-o",
        f"train.max_steps={STEPS}",
        "-o",
        f"checkpoint.every_steps={EVERY}",
        "-o",
        "train.eval_every_epochs=100",
    )[2:]
    train = [sys.executable, "-u", "-m", "apps.train", *args]
    with job([*cluster.mpirun_argv(), *train], worker_env(runs.held_at(f"step {KILLED_AT}/"))) as proc:
        text = read_until(proc, f"step {KILLED_AT}/")  # rank 0 holds there until the job ends
        assert kill_node(cluster, 1, "apps.train") and proc.poll() is None, text
        text += proc.communicate(timeout=60)[0]  # the job ends within 60 s of losing the node
    assert proc.returncode != 0 and "done:" not in text, text
    assert any(re.search(pattern, text) for pattern in LOST_NODE1), text

    resumed = check(
        subprocess.run(
            [*cluster.mpirun_argv(nodes=[0]), *train, "--resume", "auto"],
            cwd=ROOT,
            env=worker_env(),
            capture_output=True,
            text=True,
            timeout=240,
        ),
        "--resume auto on node0",
    ).stdout
    segment, sample = position(SAVED, 4)
    assert re.search(rf"resumed from \S+step0*{SAVED} at step {SAVED} \(epoch 0, segment {segment}\)", resumed), resumed
    assert (
        f"the checkpoint was written on 4 rank(s), this run has 2: it continues at sample {sample} of segment "
        f"{segment} of epoch 0 in steps of {2 * BATCH} samples"
    ) in resumed, resumed
    assert "mbsgd over 2 rank(s)" in resumed, resumed
    # the run's end in samples (STEPS global batches of 4 ranks) is 2 * STEPS steps of 2 ranks; from the
    # resumed position that is this many more steps, counted on from the checkpoint's step
    at = segment * (SEGMENT // (2 * BATCH)) + sample // (2 * BATCH)
    done = SAVED + 2 * STEPS - at
    assert f"done: {done} steps" in resumed, resumed
    rows = [json.loads(line) for line in (tmp_path / "lose" / "train.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == done and rows[-1]["ranks"] == 2, rows[-1]


@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_losing_node1_under_torchrun_names_the_node_and_its_ranks(cluster: Cluster) -> None:
    worker = "tests.cluster.workers.nodes"
    node0_argv, node1_argv = cluster.torchrun_argvs(["-m", worker, "--hold"])
    with job(node0_argv, worker_env()) as node0, job(node1_argv, worker_env()):
        text = read_until(node0, "nodes ok", 2)
        assert len(kill_node(cluster, 1, worker)) >= 2, text  # its ranks (and its torchrun: the node is gone)
        text += node0.communicate(timeout=60)[0]
    assert node0.returncode != 0, text
    assert re.search(
        r"failed on rank [01] of 4 \(backend 'gloo'\): .*\(the peer at 127\.77\.0\.2 is node1: "
        r"ranks 2, 3\)",
        text,
    ), text
