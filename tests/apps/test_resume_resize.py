"""apps.train resumed on another number of ranks (4 -> 2 and 2 -> 4), preempted by a real SIGTERM after 2
steps: mbsgd (identical state) and zero1/2/3 (sharded, resharded) resume, on the 1-D layout and as 2 pipeline
stages (pp2 x dp2 <-> pp2 x dp1: each stage's state identical, or sharded per dp_shard index); plsgd (per-rank
state), a zero2 checkpoint under plsgd, a pp=2 checkpoint on pp=1 and ZeRO inside plsgd on another
dp_replicate x dp_shard are refused, each naming why. For every resumed run: every sample is trained on as
often as in an uninterrupted run (twice: 2 epochs), the learning rate of every step is the schedule's at
the samples trained so far (its horizon kept in samples: 192), and the last step's equals the
uninterrupted run's on the resumed run's data-parallel ranks. Three launches (4, 2, 4 ranks) carry every
case."""

from __future__ import annotations

import csv
import json
import math
import re
from collections import Counter
from pathlib import Path

import pytest

from tests.apps.workers.resume_resize import BATCH, EPOCHS, SAMPLES
from tests.launch import mpirun

pytestmark = pytest.mark.mpi
ALGORITHMS = {"mb": "mbsgd", "z1": "zero1", "z2": "zero2", "z3": "zero3"}
STAGED = {f"p{k}": a for k, a in ALGORITHMS.items()}  # the same on 2 pipeline stages (pp=2)
HSDP = "sharding=zero2:dp_replicate=2"  # zero2 inside dp_shard, plsgd across dp_replicate
STOP = 2  # steps before the preemption
TOTAL = EPOCHS * SAMPLES  # the schedule's horizon in samples
WARMUP = SAMPLES // 2  # schedule.warmup_epochs=0.5
PEAK, FLOOR = 0.1, 0.01


def _lr_at(samples: int) -> float:
    """The cosine schedule with warm-up, written in samples (independently of algorithms.schedules)."""
    if samples < WARMUP:
        return PEAK * samples / WARMUP
    return FLOOR + (PEAK - FLOOR) * 0.5 * (1 + math.cos(math.pi * (samples - WARMUP) / (TOTAL - WARMUP)))


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("resize")

    def layout(key: str) -> str:
        return ":pp=2" if key in STAGED else ""

    every = {**ALGORITHMS, **STAGED}
    first = [f"run:{k}42:{a}:stop_after={STOP}{layout(k)}" for k, a in every.items()] + [
        f"run:pl42:plsgd:stop_after={STOP}",
        f"run:hs44:plsgd:stop_after={STOP}:{HSDP}",
        "run:ref4:mbsgd",
    ]
    second = (
        ["refuse:pl42:plsgd:pl42", "refuse:z2pl:plsgd:z242", "refuse:pp21:mbsgd:pmb42"]
        + [f"check:c{k}42:{a}:{k}42:pp=2" for k, a in STAGED.items()]
        + [f"run:{k}42:{a}:resume{layout(k)}" for k, a in every.items()]
        + [f"run:{k}24:{a}:stop_after={STOP}{layout(k)}" for k, a in every.items()]
        + ["run:ref2:mbsgd"]
    )
    third = (
        [f"check:c{k}24:{a}:{k}24:pp=2" for k, a in STAGED.items()]
        + [f"run:{k}24:{a}:resume{layout(k)}" for k, a in every.items()]
        + ["refuse:hsx:plsgd:hs44:sharding=zero2:dp_replicate=4"]
    )
    text = ""
    for ranks, actions in ((4, first), (2, second), (4, third)):
        text += mpirun(ranks, "tests.apps.workers.resume_resize", str(out), *actions, timeout=600).stdout
    return out, text


def _counts(out: Path, name: str) -> Counter:  # the first stage's ranks record (the worker's docstring)
    return Counter(
        int(i)
        for f in (out / "records").glob(f"{name}.rank*.txt")
        for line in f.read_text().split("\n")
        for i in line.split()
    )


def _rows(out: Path, name: str) -> list[dict[str, str]]:
    return list(csv.DictReader(open(out / name / "train.csv")))


@pytest.mark.parametrize("key", list(ALGORITHMS) + list(STAGED))
@pytest.mark.parametrize("before, after", [(4, 2), (2, 4)])
def test_a_resume_on_other_ranks_keeps_the_samples_and_the_schedule(
    jobs: tuple[Path, str], key: str, before: int, after: int
) -> None:
    out, text = jobs
    stages = 2 if key in STAGED else 1
    name, dp_before, dp_after = f"{key}{before}{after}", before // stages, after // stages  # data-parallel ranks
    counts = _counts(out, name)
    assert counts == _counts(out, "ref2") == Counter({i: EPOCHS for i in range(SAMPLES)}), counts
    rows = _rows(out, name)
    assert [int(r["step"]) for r in rows] == list(range(1, len(rows) + 1))
    samples = [
        (s - 1) * BATCH * dp_before if s <= STOP else STOP * BATCH * dp_before + (s - 1 - STOP) * BATCH * dp_after
        for s in (int(r["step"]) for r in rows)
    ]  # trained on before each step
    assert samples[-1] + BATCH * dp_after == TOTAL
    for at, row in zip(samples, rows):
        assert float(row["lr"]) == pytest.approx(_lr_at(at), rel=1e-9, abs=1e-12), (row, at)
    if dp_after in (2, 4):  # the uninterrupted runs on as many data-parallel ranks
        assert float(rows[-1]["lr"]) == pytest.approx(float(_rows(out, f"ref{dp_after}")[-1]["lr"]), rel=1e-12)
    horizon = TOTAL // (BATCH * dp_after)
    shown = rf" as pp=2 x dp_replicate=1 x dp_shard={dp_after}" if stages > 1 else ""
    assert re.search(
        rf"{name}: mlp on recorded, {every_name(key)} over {after} rank\(s\){shown}.*lr schedule "
        rf"horizon {horizon} steps",
        text,
    ), text
    assert f"the checkpoint was written on {before} rank(s), this run has {after}" in text


@pytest.mark.parametrize("key", list(STAGED))
@pytest.mark.parametrize("before, after", [(4, 2), (2, 4)])
def test_a_stage_restored_on_other_ranks_holds_the_saved_state(
    jobs: tuple[Path, str], key: str, before: int, after: int
) -> None:
    """Every rank's stage right after the restore: the model's values and the optimizer's momentum equal the
    checkpoint's files (ZeRO's: resharded from the saved shards onto this dp_shard)."""
    out, _ = jobs
    for rank in range(after):
        bad = json.loads((out / f"check.c{key}{before}{after}.rank{rank}.json").read_text())
        assert bad == [], (rank, bad)


def every_name(key: str) -> str:
    return {**ALGORITHMS, **STAGED}[key]


def test_per_rank_state_and_another_algorithms_checkpoint_are_refused(jobs: tuple[Path, str]) -> None:
    out, _ = jobs
    results = json.loads((out / "results.pl42.json").read_text())
    assert re.search(
        r"checkpoint .*pl42.* \(algorithm 'plsgd'\) holds model_state_dict per rank \(each rank's "
        r"differs\) for 4 data-parallel rank\(s\); this run has 2 .*resume with 4",
        results["pl42"]["error"],
    ), results
    assert re.search(
        r"checkpoint .*z242.* was written by algorithm 'zero2' \(model identical, optim sharded\); "
        r"this run uses 'plsgd': resume with algorithm.name=zero2",
        results["z2pl"]["error"],
    ), results
    assert re.search(
        r"checkpoint .*pmb42.* was written with pp=2 pipeline stage\(s\); this run has pp=1: .*resume "
        r"with pp=2",
        results["pp21"]["error"],
    ), results


def test_zero_inside_a_method_resumes_only_on_its_replicas_and_shards(jobs: tuple[Path, str]) -> None:
    out, _ = jobs
    results = json.loads((out / "results.cpmb24.json").read_text())  # the third launch's
    assert re.search(
        r"written on dp_replicate=2 x dp_shard=2 with zero2 inside dp_shard; this run has "
        r"dp_replicate=4 x dp_shard=1: .*resume with the sizes it was written with",
        results["hsx"]["error"],
    ), results
