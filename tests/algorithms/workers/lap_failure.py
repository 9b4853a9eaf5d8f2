"""Rank worker: a worker process that fails on rank 1 stops the run on every rank with a clear error
(rank 1: the worker's traceback; rank 0: that another rank failed), instead of a hang."""

from __future__ import annotations

import torch

import algorithms
import pycomm
from tests.algorithms.lap_models import Scale, failing_loss, linear_loss
from tests.algorithms.test_lap_workers import ones_dataset


def main() -> None:
    pycomm.init()
    comm = pycomm.world()
    model = Scale()
    opt = algorithms.CommOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.01), algorithm="lapsgd", comm=comm, num_processes=2, averaging_freq=2
    )
    loss = failing_loss if comm.rank == 1 else linear_loss
    try:
        opt.train(model, loss, ones_dataset(256), steps=100_000, batch_size=4)
    except RuntimeError as e:
        expected = "deliberate failure in a worker" if comm.rank == 1 else "on another rank failed"
        assert expected in str(e), str(e)
    else:
        raise AssertionError("train() returned although a worker failed")
    comm.barrier()  # both ranks are still in step: the communicator is usable after the failure
    print(f"rank {comm.rank}: failure reported", flush=True)


if __name__ == "__main__":
    main()
