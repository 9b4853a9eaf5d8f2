"""One process of benchmarks/staleness.py (started independently: PYCOMM_PS_*): train TinyCNN on MNIST
with a fault-tolerant algorithm; the straggler rank sleeps as long as each step computed (2x slower).
Writes OUT/rank<r>.json: samples, seconds (and how many of them computing, sleeping, inside opt.step),
bytes, staleness, and (server or ssp rank 0) the final accuracy. The trainer that holds the first data
shard (ssp rank 0, the first worker) also keeps a copy of its parameters every EVAL_EVERY steps with the
time since its start, and evaluates them after the run: the accuracy curve behind "time to 95%".
Usage: staleness_run CASE_JSON STEPS STRAGGLER OUT"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import algorithms
from benchmarks.mnist_cnn import TinyCNN, accuracy, shard_batches, split

BATCH = 32
EVAL_EVERY = 10


def main() -> None:
    torch.set_num_threads(1)
    case, steps, straggler, out = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    rank, world = int(os.environ["PYCOMM_PS_RANK"]), int(os.environ["PYCOMM_PS_WORLD"])
    (xt, yt), (xe, ye) = split()
    torch.manual_seed(0)
    model = TinyCNN()
    opt = algorithms.CommOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.05, momentum=case.get("momentum", 0.9)),
        algorithm=case["algorithm"],
        model=model,
        **case["options"],
    )
    result: dict = {"rank": rank}
    if getattr(opt, "is_server", False):
        opt.serve()
        result["accuracy"] = accuracy(model, xe, ye)
    else:
        index, count = type(opt).data_position(rank, world, opt.options)
        batches = [b for epoch in range(100) for b in shard_batches(len(yt), index, count, BATCH, epoch)][:steps]
        snapshots: list[tuple[float, list[torch.Tensor]]] = []
        computing = sleeping = stepping = 0.0
        tic = time.perf_counter()
        for t, idx in enumerate(batches):
            t0 = time.perf_counter()
            opt.zero_grad()
            loss = F.cross_entropy(model(xt[idx]), yt[idx])
            loss.backward()
            t1 = time.perf_counter()
            if rank == straggler:
                time.sleep(t1 - t0)  # compute twice as slow
            t2 = time.perf_counter()
            opt.step(loss=loss)
            t3 = time.perf_counter()
            computing, sleeping, stepping = computing + t1 - t0, sleeping + t2 - t1, stepping + t3 - t2
            if index == 0 and (t + 1) % EVAL_EVERY == 0:
                snapshots.append((t3 - tic, [p.detach().clone() for p in model.parameters()]))
        opt.close()
        result.update(
            samples=len(batches) * BATCH,
            seconds=time.perf_counter() - tic,
            computing=computing,
            sleeping=sleeping,
            stepping=stepping,
        )
        if rank == 0:
            result["accuracy"] = accuracy(model, xe, ye)
        if snapshots:
            curve = []
            for seconds, values in snapshots:
                torch.nn.utils.vector_to_parameters(torch.cat([v.reshape(-1) for v in values]), model.parameters())
                curve.append((seconds, accuracy(model, xe, ye)))
            result["curve"] = curve
    stats = opt.comm_stats()
    result.update(
        bytes_pushed=stats["bytes_pushed"],
        max_staleness=stats["max_staleness"],
        mean_staleness=stats["mean_staleness"],
        rejected=stats["rejected"],
    )
    (out / f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
