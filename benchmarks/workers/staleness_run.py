"""One process of benchmarks/staleness.py (started independently: PYCOMM_PS_*): train TinyCNN on MNIST
with a fault-tolerant algorithm; the straggler rank sleeps as long as each step computed (2x slower).
Writes OUT/rank<r>.json: samples, seconds, bytes, staleness, and (server or ssp rank 0) the final accuracy.
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
from tests.algorithms.mnist import TinyCNN, accuracy, shard_batches, split

BATCH = 32


def main() -> None:
    torch.set_num_threads(1)
    case, steps, straggler, out = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    rank, world = int(os.environ["PYCOMM_PS_RANK"]), int(os.environ["PYCOMM_PS_WORLD"])
    (xt, yt), (xe, ye) = split()
    torch.manual_seed(0)
    model = TinyCNN()
    opt = algorithms.CommOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=case.get("momentum", 0.9)),
                                   algorithm=case["algorithm"], model=model, **case["options"])
    result: dict = {"rank": rank}
    if getattr(opt, "is_server", False):
        opt.serve()
        result["accuracy"] = accuracy(model, xe, ye)
    else:
        index, count = type(opt).data_position(rank, world, opt.options)
        batches = [b for epoch in range(100) for b in shard_batches(len(yt), index, count, BATCH, epoch)][:steps]
        tic = time.perf_counter()
        for idx in batches:
            t0 = time.perf_counter()
            opt.zero_grad()
            loss = F.cross_entropy(model(xt[idx]), yt[idx])
            loss.backward()
            if rank == straggler:
                time.sleep(time.perf_counter() - t0)   # compute twice as slow
            opt.step(loss=loss)
        opt.close()
        result.update(samples=len(batches) * BATCH, seconds=time.perf_counter() - tic)
        if rank == 0:
            result["accuracy"] = accuracy(model, xe, ye)
    stats = opt.comm_stats()
    result.update(bytes_pushed=stats["bytes_pushed"], max_staleness=stats["max_staleness"],
                  mean_staleness=stats["mean_staleness"], rejected=stats["rejected"])
    (out / f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
