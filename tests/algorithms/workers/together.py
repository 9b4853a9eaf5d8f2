"""Rank worker: several algorithms workers' cases in turn in the same ranks, so that one launch per world
size serves their test files (a launch costs about 3 s of CPU per rank before its first case).
Usage: together OUT_DIR WORKER [WORKER ...]: modules of tests/algorithms/workers with a cases(comm)
function; each case is reported as WORKER/CASE."""

from __future__ import annotations

import importlib
import sys

from tests.algorithms.workers.common import run_cases, world


def main() -> None:
    comm = world()
    run_cases(
        comm,
        [
            (f"{worker}/{name}", run)
            for worker in sys.argv[2:]
            for name, run in importlib.import_module(f"tests.algorithms.workers.{worker}").cases(comm)
        ],
    )


if __name__ == "__main__":
    main()
