"""One process of a fault-tolerant algorithm on the rule-check problem (tests/algorithms/problem.py),
started independently (tests.launch.independent): the server serves, workers (or ssp ranks) train
`steps` steps on their fixed batches, optionally `slow` times slower (sleeping), and each process saves
its final parameters and statistics (ssp: and the staleness of each of its steps) to OUT/rank<r>.pt. With
servers > 1 the servers start from one model and the k-th worker trains on the batches of rank k whatever
the number of servers.

    python -m tests.algorithms.workers.ps_rules ALGORITHM OPTIONS_JSON STEPS OUT INNER [SLOW_RANK SLOW_FACTOR]

With `--cases`, the same processes run several cases one after another (tests/algorithms/ps_cases.py: a
process start costs far more than a case), each with a fresh model and optimizer, in a world of its own
size (the ranks beyond it sit it out) on ports of its own (case k: the launch's base port + k * the
launch's world), saving OUT/<name>-rank<r>.pt, or {"error": traceback} when the case raised here:

    python -m tests.algorithms.workers.ps_rules --cases CASES_JSON OUT"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

import algorithms
from algorithms.ps.ps_settings import ADDRESS_ENV, RANK_ENV, WORLD_ENV
from tests.algorithms.problem import loss_on, make_inner, make_model

STEP_SECONDS = 0.02  # the fast ranks' step time when a slow rank is asked for (sleeping)


def train(
    rank: int, algorithm: str, options: dict, steps: int, inner: str, slow_rank: int = -1, slow: float = 1.0
) -> dict[str, Any]:
    """Serve or train one run; this rank's final parameters and statistics (ssp: the staleness of each step)."""
    servers = options.get("servers", 1) if algorithm != "ssp" else 0
    # the servers' initial model must win (every server's the same: each holds a shard of it)
    model = make_model(seed=1 if rank < servers else 1 + rank)
    batches = rank - servers + 1 if servers else rank  # worker k's batches whatever the number of servers
    opt = algorithms.CommOptimizer(make_inner(inner, model.parameters()), algorithm=algorithm, model=model, **options)
    result: dict = {"seen": []}  # ssp: the staleness of this rank's gradient of each step
    if getattr(opt, "is_server", False):
        result["summary"] = opt.serve()
    else:
        for t in range(steps):
            if slow_rank >= 0:
                time.sleep(STEP_SECONDS * (slow if rank == slow_rank else 1.0))
            opt.zero_grad()
            loss = loss_on(model, batches, t)
            loss.backward()
            opt.step(loss=loss)
            if algorithm == "ssp":
                result["seen"].append(opt.comm_stats()["step_metrics"]["staleness_max"])
        opt.close()
    result.update(params=[p.detach().clone() for p in model.parameters()], stats=opt.comm_stats())
    if getattr(opt, "is_server", False):
        opt.close()  # its sockets and ports go now (the next case's process runs on), not when collected
    return result


def run_cases(rank: int, cases: list[dict[str, Any]], out: Path) -> None:
    launch_world = int(os.environ[WORLD_ENV])
    host, port = os.environ[ADDRESS_ENV].rsplit(":", 1)
    for k, case in enumerate(cases):
        if rank >= case["world"]:
            continue
        os.environ[WORLD_ENV] = str(case["world"])
        os.environ[ADDRESS_ENV] = f"{host}:{int(port) + k * launch_world}"
        slow = case.get("slow") or (-1, 1.0)
        try:
            result = train(rank, case["algorithm"], case["options"], case["steps"], case["inner"], *slow)
        except Exception:  # noqa: BLE001 - the test names the case and shows this; the next cases still run
            result = {"error": traceback.format_exc()}
        torch.save(result, out / f"{case['name']}-rank{rank}.pt")


def main() -> None:
    torch.set_num_threads(1)
    if sys.argv[1] == "--cases":
        run_cases(int(os.environ[RANK_ENV]), json.loads(sys.argv[2]), Path(sys.argv[3]))
        return
    algorithm, options, steps, out = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    inner = sys.argv[5]
    slow_rank, slow = (int(sys.argv[6]), float(sys.argv[7])) if len(sys.argv) > 7 else (-1, 1.0)
    if RANK_ENV in os.environ:
        rank = int(os.environ[RANK_ENV])
    else:  # under mpirun: the algorithm exchanges addresses over the communicator
        import pycomm

        rank = pycomm.init().rank
    result = train(rank, algorithm, options, steps, inner, slow_rank, slow)
    torch.save(result, out / f"rank{rank}.pt")


if __name__ == "__main__":
    main()
