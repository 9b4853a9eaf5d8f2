"""One rank of benchmarks/nodes.py's like-for-like DiLoCo case: pycomm's DiLoCo (algorithms.CommOptimizer
directly, no apps.train) in the bare loop of nodes_torchft.py with torchft's settings exactly: the same three
fragments (benchmarks/nodes_problem.py's) synced in the same order, one every
SYNC / 3 steps, one step of delay, mixing 0.5, outer SGD lr 0.7 momentum 0.9 Nesterov, fp32, the same data
order, and the first rank scoring its own model. Started by mpirun over the nodes (one rank per node slot).
Usage: nodes_diloco STEPS EVAL_EVERY OUT SYNC [--outer-lr 0.7] [--problem NAME] [--seed K]"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

import algorithms
import pycomm
from benchmarks.nodes_problem import Problem
from benchmarks.workers.nodes_loop import add_problem_options, initial_model, train, write


def torchft_fragments(problem: Problem, model: torch.nn.Module) -> torch.nn.Module:
    """A holder of the model's parameters whose layers (algorithms/fragments.py: one per top-level index) are
    torchft's fragments, ordered so that pycomm's schedule (fragment f at steps t with t mod H = f H / 3,
    fragment 0 last) syncs them in torchft's order."""
    first, second, last = problem.fragments(model)
    return torch.nn.Sequential(last, first, second)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("steps", type=int)
    ap.add_argument("eval_every", type=int)
    ap.add_argument("out", type=Path)
    ap.add_argument("sync", type=int)
    ap.add_argument("--outer-lr", type=float, default=0.7)
    add_problem_options(ap)
    args = ap.parse_args()
    comm = pycomm.init()
    model = initial_model(args)
    opt = algorithms.CommOptimizer(
        args.problem.optimizer(model),
        algorithm="diloco",
        model=torchft_fragments(args.problem, model),
        inner_steps=args.sync,
        fragments=3,
        sync_delay=1,
        mixing=0.5,
        outer_lr=args.outer_lr,
        outer_momentum=0.9,
        nesterov=True,
    )
    curve, clock = train(args.problem, model, opt, args.steps, args.eval_every, comm.rank, comm.size, args.seed)
    if comm.rank == 0:
        write(args.out, args.steps, curve, clock)
    comm.barrier()


if __name__ == "__main__":
    main()
