"""Runs of apps.train's training loop on this job's ranks for test_resume_resize: each run trains an MLP on a
random-tensor dataset that records every sample index it serves (per run and rank, appended across
resumes; with pipeline stages, only the first stage's ranks record: the stages of a replica read the same
batches) and, given stop_after=K, sends rank 0 a real SIGTERM when it serves its K-th batch (a
preemption: the run saves a .preempt checkpoint at that step's boundary and stops). A run may resume
(`--resume auto`) a run written on another number of ranks; refusals are caught and reported.
argv: OUT_DIR then actions, each `run:NAME:ALGORITHM[:stop_after=K][:resume][:PARALLEL=VALUE...]` or
`refuse:NAME:ALGORITHM:CHECKPOINT_RUN[:PARALLEL=VALUE...]` (resume NAME from CHECKPOINT_RUN's newest
checkpoint) or `check:NAME:ALGORITHM:CHECKPOINT_RUN[:PARALLEL=VALUE...]` (restore it, train nothing, and
compare this rank's restored stage state with the files: the model's values, and the optimizer's
per-element state, unsharded here from the saved shards for ZeRO); PARALLEL is a key of the parallel:
section (pp, dp_replicate, sharding). Rank 0 writes OUT_DIR/results.<first action's NAME>.json: {name:
{"error": text or null}}; a check writes OUT_DIR/check.<NAME>.rank<r>.json on every rank: the differences."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch

import pycomm
from apps import stage_checkpoint
from apps.checkpoint import CheckpointError, complete
from apps.config import loading
from apps.data import DATASETS
from apps.data.random_tensors import RandomTensors, load
from apps.run import Run
from apps.train import train

SAMPLES, BATCH, SEGMENT, EPOCHS = 96, 4, 48, 2


class Recorded:
    """The training split, writing the indices of every batch it serves to `record` (one line each)."""

    def __init__(self, data: RandomTensors, record: str, stop_after: int | None) -> None:
        self.data, self.record, self.stop_after, self.served = data, record, stop_after, 0

    def __len__(self) -> int:
        return len(self.data)

    def batch(self, indices: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with open(self.record, "a") as f:
            f.write(" ".join(map(str, indices.tolist())) + "\n")
        self.served += 1
        if self.stop_after == self.served and pycomm.world().rank == 0:
            os.kill(os.getpid(), signal.SIGTERM)  # what SLURM sends before a time limit
        return self.data.batch(indices)


def recorded(
    record: str,
    stop_after: int | None = None,
    num_samples: int = SAMPLES,
    eval_samples: int = 8,
    shape: list[int] = (1, 4, 4),
    num_classes: int = 3,
    stages: int = 1,
) -> Any:
    splits = load(num_samples, eval_samples, shape, num_classes)
    world = pycomm.world()
    if world.rank < world.size // stages:  # the first stage's ranks (pp is the outermost mesh dimension)
        splits.train = Recorded(splits.train, f"{record}.rank{world.rank}.txt", stop_after)
    return splits


def config(out: Path, name: str, algorithm: str, stop_after: int | None, parallel: dict[str, str]) -> Any:
    options = {
        "record": str(out / "records" / name),
        **({"stop_after": stop_after} if stop_after else {}),
        "stages": int(parallel.get("pp", 1)),
    }
    layout = [f"parallel.{k}={v}" for k, v in parallel.items()] + (
        ["parallel.microbatches=2"] if "pp" in parallel else []
    )
    overrides = [
        *layout,
        f"out_dir={out}",
        f"name={name}",
        f"algorithm.name={algorithm}",
        "algorithm.options={averaging_freq: 2}" if algorithm == "plsgd" else "algorithm.options={}",
        "model.name=mlp",
        "model.options={in_features: 16, hidden: [8], num_classes: 3}",
        "data.name=recorded",
        f"data.options={json.dumps(options)}",
        f"data.batch_size={BATCH}",
        f"data.segment_size={SEGMENT}",
        f"train.epochs={EPOCHS}",
        "train.log_every=1",
        "train.eval_every_epochs=1",
        "optim.name=sgd",
        "optim.lr=0.1",
        "optim.momentum=0.9",
        "schedule.name=cosine",
        "schedule.warmup_epochs=0.5",
        "schedule.min_lr=0.01",
        "checkpoint.save_best=false",
        "logging.plot=false",
        "logging.progress=false",
    ]
    return loading.load(None, overrides)


def _load(path: Path) -> Any:
    return torch.load(path, map_location="cpu", weights_only=False)


def _optimizer_state(run: Run, source: Path, stage: str) -> tuple[dict[int, dict], dict[int, dict]]:
    """({parameter index: {key: this run's restored value}}, the same from the files), per-element keys."""
    if not hasattr(run.opt, "load_sharded_state_dict"):  # not sharded: its own state_dict holds the whole
        return run.opt.state_dict()["optimizer"]["state"], _load(source / f"optim_state_dict{stage}.pt")["optimizer"][
            "state"
        ]
    mine = run.opt.full_state_dict()["optimizer"]["state"]
    shards = sorted((_load(f) for f in source.glob(f"optim_state_dict{stage}*.pt")), key=lambda s: s["rank"])
    saved: dict[int, dict] = {}
    for group in range(len(shards[0]["groups"])):  # each group's flat state: the shards in rank order
        for key in shards[0]["groups"][group]["state"]:
            flat, at = torch.cat([s["groups"][group]["state"][key] for s in shards]), 0
            for j in shards[0]["groups"][group]["params"]:
                n = torch.Size(shards[0]["shapes"][j]).numel()
                saved.setdefault(j, {})[key] = flat[at : at + n].view(shards[0]["shapes"][j])
                at += n
    return mine, saved


def check(run: Run, source: Path) -> list[str]:
    """Where this rank's restored stage differs from checkpoint `source`'s files."""
    stage = f".pp{run.layout.pipe.stage}" if run.layout.pipe is not None else ""
    bad = []
    saved = _load(source / f"model_state_dict{stage}.pt")
    mine = stage_checkpoint.model_state(run.layout, run.opt, run.model)
    if set(saved) != set(mine):
        bad.append(f"model keys {sorted(mine)} != {sorted(saved)}")
    bad += [f"model {k}" for k in saved if k in mine and not torch.equal(mine[k].float(), saved[k].float())]
    mine_state, saved_state = _optimizer_state(run, source, stage)
    for j, values in saved_state.items():
        for key, v in values.items():
            if torch.is_tensor(v) and v.dim() > 0 and not torch.equal(mine_state[j][key].float(), v.float()):
                bad.append(f"optimizer state {j} {key}")
    if not saved_state:
        bad.append("the saved optimizer holds no per-element state to compare")
    return bad


def main() -> None:
    out = Path(sys.argv[1])
    (out / "records").mkdir(parents=True, exist_ok=True)
    DATASETS.add("recorded", recorded)
    results: dict[str, dict[str, Any]] = {}
    for action in sys.argv[2:]:
        kind, name, algorithm, *rest = action.split(":")
        settings = dict(r.split("=") for r in rest if "=" in r)
        stop = int(settings.pop("stop_after")) if "stop_after" in settings else None
        if kind == "run":
            train(config(out, name, algorithm, stop, settings), "auto" if "resume" in rest else None)
            results[name] = {"error": None}
            continue
        source = complete(out / rest[0] / "checkpoints", "ckpt")[-1]
        if kind == "check":
            bad = check(Run(config(out, name, algorithm, None, settings), str(source)), source)
            (out / f"check.{name}.rank{pycomm.world().rank}.json").write_text(json.dumps(bad))
            results[name] = {"error": None}
            continue
        try:
            train(config(out, name, algorithm, None, settings), str(source))
        except CheckpointError as e:
            results[name] = {"error": str(e)}
        else:
            results[name] = {"error": None}
    if pycomm.world().rank == 0:
        first = sys.argv[2].split(":")[1]
        (out / f"results.{first}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main()
