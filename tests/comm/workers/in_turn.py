"""Runs several rank workers of tests/comm/workers one after another in this process (each its main()), so
one launch of a world serves them all: starting python and torch on every rank costs more than most of
these workers' checks. argv: the workers' module names under tests.comm.workers, in the order to run them.
An uncaught failure in one ends the job as it would alone (the workers after it do not run)."""

from __future__ import annotations

import importlib
import sys


def main(workers: list[str]) -> None:
    for name in workers:
        importlib.import_module(f"tests.comm.workers.{name}").main()


if __name__ == "__main__":
    main(sys.argv[1:])
