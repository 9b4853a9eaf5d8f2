"""Run every rule configuration with pycomm on real ranks and compare each step with the
independent simulation (fp32, tolerance 1e-6). Usage: rules OUT_DIR [CONFIG ...]"""

from __future__ import annotations

import sys
from typing import Any, Callable

from tests.algorithms.configs import RULES, STEPS
from tests.algorithms.simulate import simulate
from tests.algorithms.workers.common import build, max_diff, run_cases, train, world

TOL = 1e-6


def compare(comm: Any, name: str) -> dict[str, Any]:
    algorithm, options, inner, batchnorm, schedule = RULES[name]
    model, opt = build(comm, algorithm, options, inner, batchnorm)
    got = train(comm, model, opt, 0, STEPS, schedule)
    want = simulate(algorithm, options, comm.size, STEPS, inner, batchnorm, schedule)
    diffs = [max_diff(g, w[comm.rank]) for g, w in zip(got, want)]
    spread = max(max_diff(w[0], w[-1]) for w in want)  # the simulated workers differ between rounds
    return {
        "ok": max(diffs) <= TOL,
        "max_diff": max(diffs),
        "per_step": diffs,
        "worker_spread": spread,
        "comm_stats": opt.comm_stats(),
        "period": opt.current_period,
    }


def cases(comm: Any, names: list[str] | None = None) -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    """Every configuration of `names` (default: all of RULES)."""
    return [(name, lambda name=name: compare(comm, name)) for name in names or RULES]


def main() -> None:
    comm = world()
    run_cases(comm, cases(comm, sys.argv[2:]))


if __name__ == "__main__":
    main()
