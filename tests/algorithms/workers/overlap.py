"""Gradient reductions started during backward (overlap_backward=True, the default) against the same
reductions started once backward has finished (False): the parameters after STEPS AdamW steps are equal
bit for bit, for mbsgd and every ZeRO stage on real ranks, and only the overlapped run has started a
bucket while backward was still producing gradients. argv: OUT_DIR."""

from __future__ import annotations

from typing import Any, Callable

import torch

import algorithms
from tests.algorithms.workers.common import max_diff, run_cases, world
from tests.algorithms.zero_problem import TinyScaled, make_inner, train

STEPS = 4
ALGORITHMS = ("mbsgd", "zero1", "zero2", "zero3")


def launched(opt: Any) -> int:
    """Buckets of this step whose reduction has started (zero3: over its units)."""
    if hasattr(opt, "units"):
        return sum(u.buckets.launched for u in opt.units)
    return opt._buckets.launched


def trained(comm: Any, algorithm: str, overlap: bool) -> tuple[list[torch.Tensor], int]:
    """(the parameters after STEPS steps, the most buckets seen launched by a gradient hook during backward)."""
    model = TinyScaled(seed=1 + comm.rank)
    opt = algorithms.CommOptimizer(
        make_inner("adamw", model.parameters()),
        algorithm=algorithm,
        comm=comm,
        model=model,
        bucket_bytes=64,
        overlap_backward=overlap,
    )  # several buckets
    seen = [0]

    def during_backward(_: torch.Tensor) -> None:  # after the optimizer's own hook on the same parameter
        seen[0] = max(seen[0], launched(opt))

    hooks = [p.register_post_accumulate_grad_hook(during_backward) for p in model.parameters()]
    train(model, opt, comm.rank, STEPS)
    for h in hooks:
        h.remove()
    params = (
        list(opt.full_state_dict()["model"].values())
        if algorithm == "zero3"  # zero3's are empty now
        else [p.detach().clone() for p in model.parameters()]
    )
    return params, seen[0]


def same_with_and_without(comm: Any, algorithm: str) -> Callable[[], dict[str, Any]]:
    def run() -> dict[str, Any]:
        overlapped, during = trained(comm, algorithm, True)
        after, during_after = trained(comm, algorithm, False)
        equal = all(torch.equal(a, b) for a, b in zip(overlapped, after))
        moved = max_diff(after, list(TinyScaled(seed=1).parameters()))
        return {
            "ok": equal and moved > 0 and during > 0 and during_after == 0,
            "bit_equal": equal,
            "max_diff": max_diff(overlapped, after),
            "moved": moved,
            "launched_during_backward": during,
            "launched_during_backward_without": during_after,
        }

    return run


def cases(comm: Any) -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    return [(a, same_with_and_without(comm, a)) for a in ALGORITHMS]


def main() -> None:
    comm = world()
    run_cases(comm, cases(comm))


if __name__ == "__main__":
    main()
