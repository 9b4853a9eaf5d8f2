"""One rank of benchmarks/pipeline.py: a training step (forward + backward of one batch in m micro-batches,
no optimizer) of the same MLP split into the same p stages, under pycomm's GPipe, 1F1B and interleaved
1F1B (2 chunks) and torch.distributed.pipelining's ScheduleGPipe and Schedule1F1B over gloo, timed on
rank 0 (the first stage, whose last backward ends each step) round robin, one step of each case per
round; rank 0 writes per case the median step seconds over the rounds, samples/s and, for pycomm, the
bubble measured from the executed order (slots) and from wall-clock compute time. argv: OUT_JSON LAYERS WIDTH BATCH
MICROBATCHES REPEATS CASES..."""

from __future__ import annotations

import json
import os
import statistics
import sys
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import algorithms
import pycomm
from algorithms.pipeline.partition import layers_of, stage_bounds, stage_module
from benchmarks.harness import measure

WARMUP = 2


def make_model(layers: int, width: int) -> nn.Sequential:
    torch.manual_seed(0)
    mods: list[nn.Module] = []
    for _ in range(layers):
        mods += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*mods)


def pycomm_step(
    schedule: str, model: nn.Sequential, comm: Any, m: int, x: torch.Tensor, y: torch.Tensor
) -> tuple[Callable[[], None], Callable[[], dict[str, Any]]]:
    pipe = algorithms.Pipeline(model, comm, schedule=schedule, microbatches=m, chunks=2)

    def step() -> None:
        pipe.stage_module.zero_grad()
        pipe.train_step(x, y, F.mse_loss)

    def extra() -> dict[str, Any]:
        st = pipe.stats()
        return {
            "bubble_slots": st["bubble"],
            "bubble_expected": st["expected_bubble"],
            "bubble_wall": statistics.mean(st["wall_bubble"]),
            "peak_live": max(st["peak_live"]),
        }

    return step, extra


def torch_step(
    schedule: str, model: nn.Sequential, comm: Any, m: int, x: torch.Tensor, y: torch.Tensor
) -> tuple[Callable[[], None], Callable[[], dict[str, Any]]]:
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    layers = layers_of(model)
    mod = stage_module(layers, stage_bounds(layers, comm.size), comm.rank)
    stage = PipelineStage(mod, comm.rank, comm.size, device=torch.device("cpu"))
    sched = (Schedule1F1B if schedule == "1f1b" else ScheduleGPipe)(stage, n_microbatches=m, loss_fn=F.mse_loss)
    first, last = comm.rank == 0, comm.rank == comm.size - 1

    def step() -> None:
        mod.zero_grad()
        if first:
            sched.step(x)
        elif last:
            sched.step(target=y, losses=[])
        else:
            sched.step()

    return step, dict


CASES: dict[str, Callable[..., Any]] = {
    "pycomm_gpipe": lambda *a: pycomm_step("gpipe", *a),
    "pycomm_1f1b": lambda *a: pycomm_step("1f1b", *a),
    "pycomm_interleaved_1f1b": lambda *a: pycomm_step("interleaved_1f1b", *a),
    "torch_gpipe": lambda *a: torch_step("gpipe", *a),
    "torch_1f1b": lambda *a: torch_step("1f1b", *a),
}


def main() -> None:
    out, layers, width, batch, m, repeats = sys.argv[1], *map(int, sys.argv[2:7])
    cases = sys.argv[7:]
    torch.set_num_threads(1)
    pycomm.init()
    comm = pycomm.world()
    if any(c.startswith("torch") for c in cases):
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{os.environ['BENCH_PORT']}", rank=comm.rank, world_size=comm.size
        )
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(batch, width, generator=g), torch.randn(batch, width, generator=g)
    built = {case: CASES[case](make_model(layers, width), comm, m, x, y) for case in cases}
    # round robin: one timed step of every case per round, so a change in the machine's load (it is
    # shared) falls on all cases alike; the median over rounds
    samples: dict[str, list[float]] = {case: [] for case in cases}
    for r in range(WARMUP + repeats):
        for case, (step, _) in built.items():
            t = measure(step, repeats=1, warmup=0)
            if r >= WARMUP:
                samples[case].append(t.median)
    result: dict[str, Any] = {}
    for case, (_, extra) in built.items():
        med = statistics.median(samples[case])
        result[case] = {
            "step_s": med,
            "step_s_min": min(samples[case]),
            "step_s_max": max(samples[case]),
            "samples_per_s": batch / med,
            **extra(),
        }
    if comm.rank == 0:
        with open(out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
