"""The fault matrix: every algorithm x (SIGTERM, kill -9 of a worker, kill -9 of a server where
the algorithm claims to survive it) on a small MNIST budget (MLP, 30 steps, a checkpoint every 10), each
cell with a deadline and assertions on the steps trained and the files written.

- Deterministic algorithms (every wrapper, every ZeRO stage, syncps): SIGTERM to the launcher at a step
  drawn per algorithm, then `--resume auto`, ends bit-exact with an uninterrupted run; a rank killed -9
  (PYCOMM_APPS_FAIL_AT) ends the job within DEADLINE_S, and `--resume auto` from its last checkpoint ends
  bit-exact too (syncps: its survivors train on instead, as asyncps's).
- lapsgd / lppsgd (Hogwild: the order of updates is not deterministic), asyncps, ssp: the counts (every
  planned step logged once; asyncps: the server's version is steps x workers) and the schedule's end (the
  last step's learning rate is the schedule's).
- kill -9 of a server: asyncps and syncps restart it from its checkpoint (the launcher) and finish; ssp's
  rank 0 (which evaluated and checkpointed): the next rank takes that over and the run finishes.
CI runs the cells of CI_CELLS, one or two per class of algorithm (PYCOMM_FAULT_MATRIX=1: every cell)."""

from __future__ import annotations

import csv
import random
import re
import time
from pathlib import Path
from typing import Callable

import psutil
import pytest
import torch

from algorithms import CosineWithWarmup
from benchmarks.benchmark_settings import FAULT_MATRIX_ENV
from pycomm import settings
from tests.apps import runs

STEPS, LR = 30, 0.05
DEADLINE_S = 60  # from the kill to the end of the job (an MPI job) or of the cell's run
RUN_TIMEOUT_S = 400  # any one run
DETERMINISTIC = ["mbsgd", "plsgd", "qsr", "easgd", "easgd+", "lsgd", "lsgd+", "zero1", "zero2", "zero3"]
HOGWILD = ["lapsgd", "lppsgd"]
SERVERS = ["asyncps", "syncps"]
PEERS = ["ssp"]
NPROC = {"asyncps": 3, "syncps": 3}  # a server and two workers; every other algorithm: 2 ranks
CELLS = [(a, c) for a in DETERMINISTIC + HOGWILD for c in ("sigterm", "kill_worker")] + [
    (a, c) for a in SERVERS + PEERS for c in ("sigterm", "kill_worker", "kill_server")
]
CI_CELLS = {
    ("zero2", "kill_worker"),
    ("lapsgd", "sigterm"),
    ("lapsgd", "kill_worker"),
    ("asyncps", "sigterm"),
    ("asyncps", "kill_server"),
    ("ssp", "sigterm"),
    ("ssp", "kill_server"),
}
FULL = settings.get(FAULT_MATRIX_ENV)


def argv(out: Path, name: str, algorithm: str, *extra: str) -> list[str]:
    options = "{worker_timeout: 6}" if algorithm in SERVERS + PEERS else "{}"  # 6 s: a starved heartbeat is not a loss
    return runs.args(
        out,
        name,
        algorithm,
        NPROC.get(algorithm, 2),
        "-o",
        f"algorithm.options={options}",
        "-o",
        f"train.max_steps={STEPS}",
        "-o",
        f"schedule.total_steps={STEPS}",
        "-o",
        "train.log_every=1",
        *extra,
    )


def step_of(algorithm: str, low: int = 5) -> int:
    """The step a fault comes at: drawn per algorithm (reproducible), inside the run."""
    return random.Random(f"{algorithm} fault").randint(low, STEPS - 6)


def rows(run_dir: Path, kind: str = "train") -> list[dict[str, str]]:
    return list(csv.DictReader(open(run_dir / f"{kind}.csv")))


def assert_counts(run_dir: Path, algorithm: str) -> None:
    """Every planned step logged once (Hogwild: one row per chunk, increasing) and the schedule's end: the
    last row's learning rate (the one its step used; Hogwild: after its chunk) is the schedule's there."""
    steps = [int(r["step"]) for r in rows(run_dir)]
    if algorithm in HOGWILD:
        assert steps == sorted(set(steps)) and steps[-1] == STEPS, steps
    else:
        assert steps == list(range(1, STEPS + 1)), steps
    schedule = CosineWithWarmup(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=LR), STEPS)
    expected = schedule.lr_at(STEPS if algorithm in HOGWILD else STEPS - 1, LR)
    assert abs(float(rows(run_dir)[-1]["lr"]) - expected) < 1e-9, (rows(run_dir)[-1]["lr"], expected)
    assert int(rows(run_dir, "eval")[-1]["step"]) == STEPS
    assert (run_dir / "checkpoints" / f"ckpt.step{STEPS:08d}" / "manifest.json").is_file()


def assert_same_as(reference: Path, run_dir: Path, algorithm: str) -> None:
    for rank in range(NPROC.get(algorithm, 2)):
        if (
            rank == 0
            or (reference / "checkpoints" / f"ckpt.step{STEPS:08d}" / f"model_state_dict.rank{rank}.pt").exists()
        ):
            runs.assert_same(runs.final_params(reference, rank), runs.final_params(run_dir, rank))


def server_state(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "ps-server-0.pt", weights_only=False)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The run directory of an uninterrupted run of `algorithm` (one per algorithm and module)."""
    made: dict[str, Path] = {}

    def get(algorithm: str) -> Path:
        if algorithm not in made:
            out = tmp_path_factory.mktemp(f"straight-{algorithm}")
            runs.run(argv(out, "straight", algorithm), timeout=RUN_TIMEOUT_S)
            made[algorithm] = out / "straight"
        return made[algorithm]

    return get


def sigterm(algorithm: str, out: Path, uninterrupted: Callable[[str], Path]) -> None:
    at = step_of(algorithm)
    cut = argv(out, "cut", algorithm)
    text = runs.preempt(cut, after_line=f"step {at}/", timeout=RUN_TIMEOUT_S).stdout
    preempted = re.search(r"preempted \(.*?\) at step (\d+): saved (\S+\.preempt)", text)
    assert preempted and int(preempted.group(1)) >= at and Path(preempted.group(2)).is_dir(), text
    assert "done:" not in text, text  # a preempted run is not recorded as finished
    resumed = runs.run(cut + ["--resume", "auto"], timeout=RUN_TIMEOUT_S).stdout
    assert f"resumed from {preempted.group(2)}" in resumed and f"done: {STEPS} steps" in resumed, resumed
    run_dir = out / "cut"
    assert_counts(run_dir, algorithm)
    if algorithm in DETERMINISTIC + ["syncps"]:
        assert_same_as(uninterrupted(algorithm), run_dir, algorithm)
    if algorithm in SERVERS:  # every worker trained every step, each push applied once
        final = server_state(run_dir)
        assert final["clocks"] == {w: STEPS - 1 for w in range(1, NPROC[algorithm])}, final["clocks"]
        workers = NPROC[algorithm] - 1
        assert final["version"] == STEPS * (workers if algorithm == "asyncps" else 1), final["version"]


def kill(algorithm: str, out: Path, rank: int, uninterrupted: Callable[[str], Path]) -> None:
    at = step_of(algorithm, 11)  # past the first checkpoint
    run = argv(out, "kill", algorithm)
    watched = runs.watch(run, f"step {at}/", {"PYCOMM_APPS_FAIL_AT": f"{rank}:{at}:kill"}, timeout=RUN_TIMEOUT_S)
    text, run_dir = watched.output, out / "kill"
    if algorithm in DETERMINISTIC + HOGWILD:  # one MPI job: it ends at once, naming the rank; resume finishes it
        assert watched.returncode != 0 and watched.after_mark < DEADLINE_S, (watched.after_mark, text)
        assert f"rank {rank} was killed by signal 9" in text, text
        assert not list((run_dir / "checkpoints").glob("*.preempt")), text
        resumed = runs.run(run + ["--resume", "auto"], timeout=RUN_TIMEOUT_S).stdout
        back = re.search(r"resumed from \S+ at step (\d+) ", resumed)  # its newest periodic or best checkpoint
        assert back and 10 <= int(back.group(1)) <= at and f"done: {STEPS} steps" in resumed, resumed
        assert_counts(run_dir, algorithm)
        if algorithm in DETERMINISTIC:
            assert_same_as(uninterrupted(algorithm), run_dir, algorithm)
        return
    # independent processes: nobody else stops; the run ends, trained, within the deadline of one run
    assert watched.returncode == 0, text
    assert f"done: {STEPS} steps" in text, text
    assert int(rows(run_dir, "eval")[-1]["step"]) == STEPS
    assert (run_dir / "checkpoints" / f"ckpt.step{STEPS:08d}" / "manifest.json").is_file()
    if algorithm in PEERS and rank == 0:
        assert "rank 1 takes over evaluation, metrics and checkpoints" in text, text
        assert "apps.launch: rank 0 was killed by signal 9; the other ranks went on without it" in text, text
    elif algorithm in SERVERS and rank == 0:
        assert (
            "apps.launch: server rank 0 was killed by signal 9; restarting it from its latest checkpoint "
            "(--resume auto), restart 1 of 3"
        ) in text, text
        # each worker's last push is its clock on the restarted server, except for a worker that had already
        # pushed every step to the killed server after the checkpoint the new one resumed from: those pushes
        # died with it (a worker far ahead of the other, about one run in six on a loaded machine)
        restart = re.search(r"resumed from \S+ at version \d+ \(worker clocks \{([^}]*)\}\)", text)
        assert restart, text
        at_restart = {int(w): int(c) for w, c in re.findall(r"(\d+): (\d+)", restart.group(1))}
        final, workers = server_state(run_dir), range(1, NPROC[algorithm])
        assert sorted(final["finished"]) == list(workers), final["finished"]
        assert all(final["clocks"][w] in (STEPS - 1, at_restart.get(w)) for w in workers), (final["clocks"], at_restart)
        assert STEPS - 1 in final["clocks"].values(), (final["clocks"], at_restart)  # one trained on after it
    else:
        assert f"rank {rank} was killed by signal 9; the other ranks went on without it" in text, text
        assert re.search(rf"(worker|rank) {rank} lost: no message for", text), text
        if algorithm == "asyncps":  # each push the server took (the workers' clocks) applied once
            final = server_state(run_dir)
            assert final["version"] == sum(c + 1 for c in final["clocks"].values()), final
            assert final["clocks"][1] == STEPS - 1, final["clocks"]


@pytest.mark.mpi
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("algorithm,cell", CELLS, ids=[f"{a}-{c}" for a, c in CELLS])
def test_fault_cell(algorithm: str, cell: str, tmp_path: Path, uninterrupted: Callable[[str], Path]) -> None:
    if (algorithm, cell) not in CI_CELLS and not FULL:
        pytest.skip("a cell of the full matrix: PYCOMM_FAULT_MATRIX=1 runs it")
    if cell == "sigterm":
        sigterm(algorithm, tmp_path, uninterrupted)
    else:  # the worker killed: the last rank (a worker of a server, a peer); the server: rank 0
        kill(algorithm, tmp_path, NPROC.get(algorithm, 2) - 1 if cell == "kill_worker" else 0, uninterrupted)
    assert not left_behind(tmp_path)


def left_behind(out: Path, grace_s: float = 15.0) -> list[str]:
    """Processes of this cell's runs still alive `grace_s` after the runs ended (a LAP worker forked by a
    rank that was killed outlived it, waiting forever, until workers died with their rank)."""
    deadline = time.monotonic() + grace_s
    while True:
        alive = [
            " ".join(p.info["cmdline"] or [])
            for p in psutil.process_iter(["cmdline"])
            if str(out) in " ".join(p.info["cmdline"] or [])
        ]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.5)
