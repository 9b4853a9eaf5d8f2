"""Rank worker: lapsgd / lppsgd train a small CNN on MNIST (2 worker processes per rank) to >= 92%. One
launch trains every case of CASES in turn (algorithm, codec 'none' or a codec name; forked workers), each
rank writing its results to argv[1] (tests/algorithms/runs.py reads them)."""

from __future__ import annotations

import math
import os
from typing import Any

import torch
import torch.nn.functional as F

import algorithms
import pycomm
from tests.algorithms import lap_mnist
from tests.algorithms.lap_models import SmallCNN
from tests.algorithms.workers.common import run_cases
from tests.algorithms.workers.lap_common import flat, same_on_all_ranks

# node minibatches per rank (all its workers together): 6.4 passes over its 4,000 images. 800 (12.8 passes)
# reached no higher: 3 runs of each case at 400 on the 2-core machine at load 15-22 gave 0.9605-0.969
STEPS = int(os.environ.get("LAP_STEPS", 400))
BATCH = int(os.environ.get("LAP_BATCH", 64))
PROCESSES = 2
# The P Hogwild workers all step the one model, so the node's step is P times a worker's: lr / P keeps
# it at the 0.05 of the other MNIST tests (at 0.05 per worker, about one run in ten diverged early).
LR = 0.05 / PROCESSES
MIN_ACCURACY = 0.92
CASES = [("lapsgd", "none"), ("lppsgd", "none"), ("lapsgd", "int8")]  # (algorithm, codec)


def name(algorithm: str, codec: str) -> str:
    return f"{algorithm}-{codec}"


def convergence(comm: Any, algorithm: str, start_method: str, codec: str) -> dict[str, Any]:
    torch.manual_seed(comm.rank)  # different initial models: wrapping must broadcast rank 0's
    model = SmallCNN()
    train, held = lap_mnist.load()
    sgd = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(sgd, step_size=2, gamma=0.5)
    options = {
        "num_processes": PROCESSES,
        "averaging_freq": 4,
        "pre_post_steps": 20,
        "codec": None if codec == "none" else codec,
    }
    if algorithm == "lppsgd":
        options["prepassm_steps"] = 100
    opt = algorithms.CommOptimizer(sgd, algorithm=algorithm, comm=comm, **options)
    assert same_on_all_ranks(comm, flat(model)), "wrapping did not broadcast rank 0's parameters"

    result = opt.train(
        model, F.cross_entropy, train, steps=STEPS, batch_size=BATCH, scheduler=sched, start_method=start_method
    )
    assert result.steps == STEPS and sum(result.per_worker) == STEPS, result
    assert all(n > 0 for n in result.per_worker), result
    assert result.rounds > 1, result
    assert same_on_all_ranks(comm, torch.tensor([float(result.rounds)])), "ranks disagree on the rounds"
    assert same_on_all_ranks(comm, flat(model)), "ranks differ after the final average"
    epochs = STEPS // math.ceil(len(train) / comm.size / BATCH)  # whole epochs of the rank's shard
    assert abs(sgd.param_groups[0]["lr"] - LR * 0.5 ** (epochs // 2)) < 1e-12, sgd.param_groups[0]["lr"]
    acc = lap_mnist.accuracy(model, held)
    print(
        f"rank {comm.rank}: {algorithm} (codec {codec}) eval accuracy {acc:.4f} after {STEPS} node minibatches, "
        f"{result.rounds} rounds, workers {result.per_worker}, {result.seconds:.1f} s, "
        f"{opt.comm_stats()['bytes'] / 2**20:.1f} MiB communicated",
        flush=True,
    )
    # Hogwild runs are not repeatable. lapsgd-int8 on the 2-core machine, 27 runs of 800 steps beside 0-2 busy
    # loops: 0.957-0.970; one loaded CI run gave 0.9325 (a bad early phase that the halving lr did not undo).
    # 92% keeps that margin and still fails a run that does not learn; lap_averaging checks the averages.
    assert acc >= MIN_ACCURACY, (acc, result)
    return {"ok": True, "accuracy": acc}


def main() -> None:
    pycomm.init()
    comm = pycomm.world()
    run_cases(comm, [(name(*c), lambda c=c: convergence(comm, c[0], "fork", c[1])) for c in CASES])


if __name__ == "__main__":
    main()
