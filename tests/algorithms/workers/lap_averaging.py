"""Rank worker: the averaging identity of lapsgd on real ranks.

Rank r's data makes every gradient exactly r + 1 in every coordinate, so each update on rank r subtracts
lr * (r + 1). Averaging by x += avg(s) - s leaves the sum over ranks of the models unchanged (it only
moves mass between ranks, and keeps the local updates made while the all-reduce was in flight), so
  sum_r x_r = -lr * sum_r (r + 1) * steps_r
whatever the interleaving; an average that overwrote x with avg(s) would lose those updates. After
the final synchronous average every rank holds sum_r x_r / N. Lock-free races can lose a rare update,
hence a tolerance of a few percent (a whole averaging scheme gone wrong is far outside it). Through
the int8 codec the identity still holds to that tolerance: every coordinate is equal, and a constant
block quantizes without error. One launch runs every case of CASES in turn (final|no-final, start method,
codec 'none' or a name), each rank writing its results to argv[1] (tests/algorithms/runs.py reads them)."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import TensorDataset

import algorithms
import pycomm
from tests.algorithms.lap_models import Scale, paced_linear_loss
from tests.algorithms.workers.common import run_cases
from tests.algorithms.workers.lap_common import flat, gather_scalar, same_on_all_ranks

LR = 1.0 / 64
STEPS = 300
WIDTH = 16
# (final average, start method of the Hogwild workers, codec): the final average or not, fork and spawn,
# and the int8 codec
CASES = [
    ("final", "fork", "none"),
    ("no-final", "fork", "none"),
    ("final", "spawn", "none"),
    ("no-final", "fork", "int8"),
]


def rank_dependent_data(size: int) -> TensorDataset:
    """Item i goes to rank i % size and has target (i % size) + 1: rank r's gradient is r + 1."""
    n = 64 * size
    target = (torch.arange(n) % size + 1).double().unsqueeze(1).expand(n, WIDTH).contiguous()
    return TensorDataset(torch.ones(n, WIDTH, dtype=torch.float64), target)


def name(final: str, start_method: str, codec: str) -> str:
    return f"{final}-{start_method}-{codec}"


def averaging(comm: Any, final_average: bool, start_method: str, codec: str) -> dict[str, Any]:
    model = Scale(WIDTH).double()
    sgd = torch.optim.SGD(model.parameters(), lr=LR)
    opt = algorithms.CommOptimizer(
        sgd, algorithm="lapsgd", comm=comm, num_processes=2, averaging_freq=3, codec=None if codec == "none" else codec
    )
    result = opt.train(
        model,
        paced_linear_loss,
        rank_dependent_data(comm.size),
        steps=STEPS,
        batch_size=8,
        final_average=final_average,
        start_method=start_method,
    )
    assert result.steps == STEPS and sum(result.per_worker) == STEPS, result
    assert result.rounds > 1 and same_on_all_ranks(comm, torch.tensor([float(result.rounds)])), result.rounds
    assert opt.node_steps == STEPS and opt.current_period == 3

    w = flat(model)
    total = w.clone()
    comm.allreduce(total, op=pycomm.SUM)
    expected = -LR * STEPS * sum(r + 1 for r in range(comm.size))
    assert torch.all((total - expected).abs() <= 0.03 * abs(expected)), (total, expected)
    if final_average:
        assert same_on_all_ranks(comm, w), "ranks differ after the final synchronous average"
    else:
        # without averaging the ranks would be lr * STEPS * |r - s| apart; averaging every 3 node
        # minibatches keeps them within the few updates made since the last round
        gaps = gather_scalar(comm, float(w[0]))
        spread = max(gaps) - min(gaps)
        assert spread < 0.25 * LR * STEPS, (gaps, LR * STEPS, result)
    print(
        f"rank {comm.rank}: w[0] = {float(w[0]):.6f}, sum {float(total[0]):.6f} vs {expected:.6f}, "
        f"{result.rounds} rounds, workers {result.per_worker}",
        flush=True,
    )
    return {"ok": True}


def main() -> None:
    pycomm.init()
    comm = pycomm.world()
    run_cases(comm, [(name(*c), lambda c=c: averaging(comm, c[0] == "final", c[1], c[2])) for c in CASES])


if __name__ == "__main__":
    main()
