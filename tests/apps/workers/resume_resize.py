"""Runs of apps.train's training loop on this job's ranks for test_resume_resize: each run trains an MLP on a
random-tensor dataset that records every sample index it serves (per run and rank, appended across
resumes) and, given stop_after=K, sends rank 0 a real SIGTERM when it serves its K-th batch (a
preemption: the run saves a .preempt checkpoint at that step's boundary and stops). A run may resume
(`--resume auto`) a run written on another number of ranks; refusals are caught and reported.
argv: OUT_DIR then actions, each `run:NAME:ALGORITHM[:stop_after=K][:resume]` or
`refuse:NAME:ALGORITHM:CHECKPOINT_RUN` (resume NAME from CHECKPOINT_RUN's newest checkpoint).
Rank 0 writes OUT_DIR/results.<first action's NAME>.json: {name: {"error": text or null}}."""
from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch

import pycomm
from apps import config_io
from apps.checkpoint import CheckpointError, complete
from apps.data import DATASETS
from apps.data.random_tensors import RandomTensors, load
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
            os.kill(os.getpid(), signal.SIGTERM)   # what SLURM sends before a time limit
        return self.data.batch(indices)


def recorded(record: str, stop_after: int | None = None, num_samples: int = SAMPLES, eval_samples: int = 8,
             shape: list[int] = (1, 4, 4), num_classes: int = 3) -> Any:
    splits = load(num_samples, eval_samples, shape, num_classes)
    splits.train = Recorded(splits.train, f"{record}.rank{pycomm.world().rank}.txt", stop_after)
    return splits


def config(out: Path, name: str, algorithm: str, stop_after: int | None) -> Any:
    options = {"record": str(out / "records" / name), **({"stop_after": stop_after} if stop_after else {})}
    overrides = [f"out_dir={out}", f"name={name}", f"algorithm.name={algorithm}",
                 "algorithm.options={averaging_freq: 2}" if algorithm == "plsgd" else "algorithm.options={}",
                 "model.name=mlp", "model.options={in_features: 16, hidden: [8], num_classes: 3}",
                 "data.name=recorded", f"data.options={json.dumps(options)}", f"data.batch_size={BATCH}",
                 f"data.segment_size={SEGMENT}", f"train.epochs={EPOCHS}", "train.log_every=1",
                 "train.eval_every_epochs=1", "optim.name=sgd", "optim.lr=0.1", "optim.momentum=0.9",
                 "schedule.name=cosine", "schedule.warmup_epochs=0.5", "schedule.min_lr=0.01",
                 "checkpoint.save_best=false", "logging.plot=false", "logging.progress=false"]
    return config_io.load(None, overrides)


def main() -> None:
    out = Path(sys.argv[1])
    (out / "records").mkdir(parents=True, exist_ok=True)
    DATASETS.add("recorded", recorded)
    results: dict[str, dict[str, Any]] = {}
    for action in sys.argv[2:]:
        kind, name, algorithm, *rest = action.split(":")
        stop = next((int(r.split("=")[1]) for r in rest if r.startswith("stop_after=")), None)
        if kind == "run":
            train(config(out, name, algorithm, stop), "auto" if "resume" in rest else None)
            results[name] = {"error": None}
            continue
        source = complete(out / rest[0] / "checkpoints", "ckpt")[-1]
        try:
            train(config(out, name, algorithm, None), str(source))
        except CheckpointError as e:
            results[name] = {"error": str(e)}
        else:
            results[name] = {"error": None}
    if pycomm.world().rank == 0:
        first = sys.argv[2].split(":")[1]
        (out / f"results.{first}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main()
