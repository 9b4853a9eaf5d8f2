"""apps.train resumed on another number of ranks (4 -> 2 and 2 -> 4), preempted by a real SIGTERM after 2
steps: mbsgd (identical state) and zero1/2/3 (sharded, resharded) resume; plsgd (per-rank state) and a zero2
checkpoint under plsgd are refused, each naming why. For every resumed run: every sample is trained on as
often as in an uninterrupted run (twice: 2 epochs), the learning rate of every step is the schedule's at
the samples trained so far (its horizon kept in samples: 192), and the last step's equals the
uninterrupted run's on the resumed run's ranks. Three launches (4, 2, 4 ranks) carry every case."""
from __future__ import annotations

import csv
import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest

from tests.launch import mpirun
from tests.apps.workers.resume_resize import BATCH, EPOCHS, SAMPLES

pytestmark = pytest.mark.mpi
ALGORITHMS = {"mb": "mbsgd", "z1": "zero1", "z2": "zero2", "z3": "zero3"}
STOP = 2                               # steps before the preemption
TOTAL = EPOCHS * SAMPLES               # the schedule's horizon in samples
WARMUP = SAMPLES // 2                  # schedule.warmup_epochs=0.5
PEAK, FLOOR = 0.1, 0.01


def _lr_at(samples: int) -> float:
    """The cosine schedule with warm-up, written in samples (independently of algorithms.schedules)."""
    if samples < WARMUP:
        return PEAK * samples / WARMUP
    return FLOOR + (PEAK - FLOOR) * 0.5 * (1 + math.cos(math.pi * (samples - WARMUP) / (TOTAL - WARMUP)))


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("resize")
    first = [f"run:{k}42:{a}:stop_after={STOP}" for k, a in ALGORITHMS.items()] + \
        [f"run:pl42:plsgd:stop_after={STOP}", "run:ref4:mbsgd"]
    second = ["refuse:pl42:plsgd:pl42", "refuse:z2pl:plsgd:z242"] + \
        [f"run:{k}42:{a}:resume" for k, a in ALGORITHMS.items()] + \
        [f"run:{k}24:{a}:stop_after={STOP}" for k, a in ALGORITHMS.items()] + ["run:ref2:mbsgd"]
    third = [f"run:{k}24:{a}:resume" for k, a in ALGORITHMS.items()]
    text = ""
    for ranks, actions in ((4, first), (2, second), (4, third)):
        text += mpirun(ranks, "tests.apps.workers.resume_resize", str(out), *actions, timeout=600).stdout
    return out, text


def _counts(out: Path, name: str) -> Counter:
    return Counter(int(i) for f in (out / "records").glob(f"{name}.rank*.txt") for line in f.read_text().split("\n")
                   for i in line.split())


def _rows(out: Path, name: str) -> list[dict[str, str]]:
    return list(csv.DictReader(open(out / name / "train.csv")))


@pytest.mark.parametrize("key", list(ALGORITHMS))
@pytest.mark.parametrize("before, after", [(4, 2), (2, 4)])
def test_a_resume_on_other_ranks_keeps_the_samples_and_the_schedule(jobs: tuple[Path, str], key: str, before: int,
                                                                  after: int) -> None:
    out, text = jobs
    name, reference = f"{key}{before}{after}", f"ref{after}"
    counts = _counts(out, name)
    assert counts == _counts(out, reference) == Counter({i: EPOCHS for i in range(SAMPLES)}), counts
    rows = _rows(out, name)
    assert [int(r["step"]) for r in rows] == list(range(1, len(rows) + 1))
    samples = [(s - 1) * BATCH * before if s <= STOP else STOP * BATCH * before + (s - 1 - STOP) * BATCH * after
               for s in (int(r["step"]) for r in rows)]   # trained on before each step
    assert samples[-1] + BATCH * after == TOTAL
    for at, row in zip(samples, rows):
        assert float(row["lr"]) == pytest.approx(_lr_at(at), rel=1e-9, abs=1e-12), (row, at)
    assert float(rows[-1]["lr"]) == pytest.approx(float(_rows(out, reference)[-1]["lr"]), rel=1e-12)
    horizon = TOTAL // (BATCH * after)
    assert re.search(rf"{name}: mlp on recorded, {ALGORITHMS[key]} over {after} rank\(s\).*lr schedule horizon "
                     rf"{horizon} steps", text), text
    assert f"the checkpoint was written on {before} rank(s), this run has {after}" in text


def test_per_rank_state_and_another_algorithms_checkpoint_are_refused(jobs: tuple[Path, str]) -> None:
    out, _ = jobs
    results = json.loads((out / "results.pl42.json").read_text())
    assert re.search(r"checkpoint .*pl42.* \(algorithm 'plsgd'\) holds model_state_dict per rank \(each rank's "
                     r"differs\) for 4 data-parallel rank\(s\); this run has 2 .*resume with 4",
                     results["pl42"]["error"]), results
    assert re.search(r"checkpoint .*z242.* was written by algorithm 'zero2' \(model identical, optim sharded\); "
                     r"this run uses 'plsgd': resume with algorithm.name=zero2", results["z2pl"]["error"]), results
