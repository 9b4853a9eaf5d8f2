"""zero1 with staleness_bound (tests/algorithms/test_zero_staleness.py): every rank trains the rule-check
problem (tests/algorithms/problem.py, SGD momentum, decaying LR) and saves what the test compares against
its independent simulation, to OUT/<case>_rank<r>.pt. argv: OUT [SLOW_RANK].

Cases: k0 (zero1 as it was, and with staleness_bound=0), k2 (bound 2; the gradient copies in flight
after every step), k2_slow (bound 2, one rank 3x slower: the same parameters), k2_clip (bound 2 with
opt.clip_grad_norm_ every step), resume (bound 2: a run with
a checkpoint at step 5, and a run resumed from it, through state_dict and through the sharded files)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import torch

from tests.algorithms.workers.common import build, train, world

STEPS, K, CUT = 10, 2, 5
CLIP = 0.05  # small enough to clip most steps of the problem
INNER = "momentum"
STEP_SECONDS = 0.02  # the ranks' step time in k2_slow (the slow one sleeps 3x as long)


def params(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def run(comm: Any, options: dict[str, Any], slow_rank: int = -1, clip: float | None = None) -> dict[str, Any]:
    model, opt = build(comm, "zero1", options, INNER, False)
    in_flight: list[int] = []

    def after(t: int) -> None:
        in_flight.append(len(opt._delayed.queue) if opt._delayed is not None else 0)
        time.sleep(STEP_SECONDS * (3.0 if comm.rank == slow_rank else 1.0) if slow_rank >= 0 else 0.0)

    norms: list[float] = []
    train(
        comm,
        model,
        opt,
        0,
        STEPS,
        schedule=True,
        on_step=after,
        before_step=(lambda t: norms.append(float(opt.clip_grad_norm_(clip)))) if clip else None,
    )
    before_close = params(model)
    opt.close()
    return {
        "params": params(model),
        "before_close": before_close,
        "stats": opt.comm_stats(),
        "in_flight": in_flight,
        "norms": norms,
    }


def resumed(comm: Any, out: Path) -> dict[str, Any]:
    """Run A: CUT steps, checkpoint (both kinds), STEPS - CUT more; runs B and C: fresh, loaded, the rest."""
    options = {"staleness_bound": K}
    model, opt = build(comm, "zero1", options, INNER, False)
    train(comm, model, opt, 0, CUT, schedule=True)
    state = opt.state_dict()  # drains: the model now holds every step taken
    model_state = {k: v.clone() for k, v in model.state_dict().items()}
    directory = out / "sharded"
    opt.save_sharded_state_dict(directory)
    train(comm, model, opt, CUT, STEPS, schedule=True)
    opt.close()
    whole = params(model)

    model_b, opt_b = build(comm, "zero1", options, INNER, False, init_seed=99)
    model_b.load_state_dict(model_state)
    opt_b.load_state_dict(state)
    train(comm, model_b, opt_b, CUT, STEPS, schedule=True)
    opt_b.close()

    model_c, opt_c = build(comm, "zero1", options, INNER, False, init_seed=98)
    opt_c.load_sharded_state_dict(directory)  # the parameters follow the loaded masters
    train(comm, model_c, opt_c, CUT, STEPS, schedule=True)
    opt_c.close()
    return {
        "whole": whole,
        "from_state_dict": params(model_b),
        "from_sharded": params(model_c),
        "steps": [opt.steps, opt_b.steps, opt_c.steps],
    }


def main() -> None:
    comm = world()
    out = Path(sys.argv[1])
    slow_rank = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    results = {
        "k0": lambda: {"default": run(comm, {}), "bound0": run(comm, {"staleness_bound": 0})},
        "k2": lambda: run(comm, {"staleness_bound": K}),
        "k2_slow": lambda: run(comm, {"staleness_bound": K}, slow_rank),
        "k2_clip": lambda: run(comm, {"staleness_bound": K}, clip=CLIP),
        "resume": lambda: resumed(comm, out),
    }
    for name, case in results.items():
        torch.save(case(), out / f"{name}_rank{comm.rank}.pt")


if __name__ == "__main__":
    main()
