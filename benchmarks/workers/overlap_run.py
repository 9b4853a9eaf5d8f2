"""One rank of benchmarks/overlap.py: the char GPT trained for a few AdamW steps on 2 ranks by torch DDP
(gloo) and by pycomm's mbsgd and zero2, one case after the other in one job, each case's profiled steps
written as a chrome trace per rank: DDP's by torch.profiler, pycomm's by pycomm.profile(torch=True) (torch's
events and pycomm's on one timeline). Every backward pass runs inside the user annotation BACKWARD, so the
analysis (benchmarks/overlap.py) finds each step's backward interval in either trace. A case named
`<algorithm>_after_backward` is that algorithm with overlap_backward=False (its gradient reductions start
once backward has produced every gradient): the same run's no-overlap floor.
argv: OUT_DIR STEPS N_LAYER N_EMBD BLOCK BATCH CASES...; writes OUT_DIR/<case>/ranks/rank<R>.json and
OUT_DIR/<case>/seconds<R>.json (seconds per profiled step on this rank)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.distributed as dist

import algorithms
import pycomm
from benchmarks.workers.composition_run import VOCAB, adamw, gpt, lm_loss

BACKWARD = "overlap::backward"
PYCOMM = ("mbsgd", "zero2")
CASES = ("torch_ddp", *PYCOMM, *(f"{name}_after_backward" for name in PYCOMM))
WARMUP = 2


def build(case: str, a: Any) -> tuple[torch.nn.Module, Any]:
    """(the module forward runs, the optimizer) of a case."""
    model = gpt(a)
    if case == "torch_ddp":
        return torch.nn.parallel.DistributedDataParallel(model), adamw(model)
    name, after, _ = case.partition("_after_backward")
    opt = algorithms.CommOptimizer(adamw(model), algorithm=name, model=model, overlap_backward=not after)
    return model, opt


def profiler(case: str, directory: Path) -> Any:
    if case == "torch_ddp":
        return torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    return pycomm.profile(directory, torch=True)


def run(case: str, comm: Any, a: Any, out: Path) -> None:
    module, opt = build(case, a)
    g = torch.Generator().manual_seed(comm.rank)
    data = torch.randint(0, VOCAB, (WARMUP + a.steps, a.batch, a.block + 1), generator=g)

    def step(t: int) -> None:
        opt.zero_grad()
        loss = lm_loss(module(data[t, :, :-1]), data[t, :, 1:])
        with torch.profiler.record_function(BACKWARD):
            loss.backward()
        opt.step()

    for t in range(WARMUP):
        step(t)
    directory = out / case
    seconds: list[float] = []
    comm.barrier()
    with profiler(case, directory) as prof:
        for t in range(WARMUP, WARMUP + a.steps):
            comm.barrier()
            t0 = time.perf_counter()
            step(t)
            seconds.append(time.perf_counter() - t0)
    if case == "torch_ddp":
        (directory / "ranks").mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(directory / "ranks" / f"rank{comm.rank}.json"))
    (directory / f"seconds{comm.rank}.json").write_text(json.dumps(seconds))
    if hasattr(opt, "remove_hooks"):
        opt.remove_hooks()


def main() -> None:
    torch.set_num_threads(1)
    pycomm.init()
    comm = pycomm.world()
    steps, n_layer, n_embd, block, batch = map(int, sys.argv[2:7])
    a = SimpleNamespace(steps=steps, n_layer=n_layer, n_embd=n_embd, block=block, batch=batch)
    cases = sys.argv[7:]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        raise SystemExit(f"benchmarks.overlap: unknown cases {unknown}; known: {', '.join(CASES)}")
    if "torch_ddp" in cases:
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{os.environ['BENCH_PORT']}", rank=comm.rank, world_size=comm.size
        )
    for case in cases:
        run(case, comm, a, Path(sys.argv[1]))
        comm.barrier()
    if dist.is_initialized():
        dist.destroy_process_group()
    pycomm.finalize()


if __name__ == "__main__":
    main()
