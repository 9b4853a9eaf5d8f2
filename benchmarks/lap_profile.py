"""Where a LAP-SGD worker's step goes against a DDP rank's step on the MNIST benchmark's tiny CNN (batch
64, one thread, in one process: compute only, no communication): the worker's real code
(algorithms.lap.worker.HogwildWorker.step on the shared counters) split into fetch, forward, backward
(autograd.grad), update (its per-parameter SGD rule) and the shared counters (claim, rates, finish), and
the DDP loop's local work (index the batch, forward, backward, torch.optim.SGD.step). Medians of timed
repeats (benchmarks.harness.measure); writes results/lap_profile.json. The benchmark's samples/s of both
follow from these: DDP adds its gradient all-reduce per step, LAP runs P workers per rank on the
rank's share of the cores plus the main process that averages.

    python -m benchmarks.lap_profile [--repeats 200]"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

from algorithms.lap.shared import MomentumState, SharedCounters
from algorithms.lap.worker import GroupHyper, HogwildWorker, WorkerSpec, fetch
from benchmarks.convergence_cases import BATCH, SGD
from benchmarks.harness import measure, save, table
from benchmarks.mnist_cnn import TinyCNN, split


def worker(model: torch.nn.Module, data: TensorDataset) -> HogwildWorker:
    params = list(model.parameters())
    counters = SharedCounters.create(torch.multiprocessing.get_context("fork"), 1, 1, 0, 1 << 40)
    counters.lrs[:] = [SGD["lr"]]
    spec = WorkerSpec(
        worker=0,
        model=model,
        loss_fn=F.cross_entropy,
        dataset=data,
        shard=torch.arange(len(data)),
        batch_size=BATCH,
        seed=0,
        device=torch.device("cpu"),
        groups=[GroupHyper(SGD["momentum"], 0.0, 0.0, False)],
        group_of=[0] * len(params),
        momentum=MomentumState.zeros(params, 1),
        counters=counters,
        block=None,
        prepassm_steps=0,
        threads=1,
        errors=None,
    )
    return HogwildWorker(spec)


def profile(repeats: int) -> list[dict[str, Any]]:
    torch.set_num_threads(1)
    (xt, yt), _ = split()
    data = TensorDataset(xt, yt)
    idx = torch.randperm(len(yt))[:BATCH]
    x, y = xt[idx], yt[idx]
    rows: list[dict[str, Any]] = []

    def add(who: str, part: str, fn: Any) -> None:
        t = measure(fn, repeats=repeats, warmup=10)
        rows.append({"who": who, "part": part, "ms": 1e3 * t.median, "ms_min": 1e3 * t.min})

    torch.manual_seed(0)
    model = TinyCNN()
    opt = torch.optim.SGD(model.parameters(), **SGD)
    loss = F.cross_entropy(model(x), y)
    add("ddp rank", "index batch", lambda: (xt[idx], yt[idx]))
    add("ddp rank", "forward", lambda: F.cross_entropy(model(x), y))
    add("ddp rank", "forward+backward", lambda: F.cross_entropy(model(x), y).backward())
    add("ddp rank", "optimizer.step (SGD)", opt.step)

    def ddp_step() -> None:
        opt.zero_grad()
        F.cross_entropy(model(xt[idx]), yt[idx]).backward()
        opt.step()

    add("ddp rank", "whole local step", ddp_step)

    hog = worker(TinyCNN(), data)
    params, counters = hog.params, hog.spec.counters
    add("lap worker", "fetch (TensorDataset)", lambda: fetch(data, idx))
    add("lap worker", "forward", lambda: F.cross_entropy(hog.spec.model(x), y))
    add(
        "lap worker",
        "forward+autograd.grad",
        lambda: torch.autograd.grad(F.cross_entropy(hog.spec.model(x), y), params),
    )
    grads = torch.autograd.grad(F.cross_entropy(hog.spec.model(x), y), params)

    def update() -> None:
        with torch.no_grad():
            for i, g in enumerate(grads):
                hog._apply(i, g, SGD["lr"])

    add("lap worker", "update (per-parameter SGD rule)", update)

    def bookkeeping() -> None:
        step = counters.claim()
        counters.lrs_for(step)
        counters.finish(0, 0.0)

    add("lap worker", "shared counters (claim, rates, finish)", bookkeeping)

    def worker_step() -> None:
        step = counters.claim()
        hog.step(fetch(data, idx), step, counters.lrs_for(step))
        counters.finish(0, 0.0)

    add("lap worker", "whole worker step", worker_step)
    del loss
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=200)
    args = ap.parse_args(argv)
    rows = profile(args.repeats)
    print(table(rows, ["who", "part", "ms", "ms_min"]))
    path = save("lap_profile", {"batch": BATCH, "threads": 1, "repeats": args.repeats, "rows": rows})
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
