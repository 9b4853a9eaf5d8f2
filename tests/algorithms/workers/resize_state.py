"""On every rank of 2: train 3 steps with mbsgd (int8 codec: per-rank residuals), plsgd and zero2, and
save each rank's states for a user's script on another number of ranks to load (test_checkpointing).
argv: directory. Files: mbsgd.rank<r>.pt ({"model", "opt"}), plsgd.rank<r>.pt, zero2.rank<r>.pt
(state_dict()), zero2.sharded.rank<r>.pt (sharded_state_dict())."""

from __future__ import annotations

import sys

import torch

import algorithms
import pycomm


def train(name: str, comm: pycomm.Communicator, **options: object) -> tuple[torch.nn.Module, algorithms.CommOptimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = algorithms.CommOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), algorithm=name, comm=comm, model=model, **options
    )
    for step in range(3):
        torch.manual_seed(100 * comm.rank + step)
        model(torch.randn(5, 4)).pow(2).sum().backward()
        opt.step()
        opt.zero_grad()
    return model, opt


def main() -> None:
    directory, comm = sys.argv[1], pycomm.init()
    rank = comm.rank
    model, opt = train("mbsgd", comm, codec="int8")
    assert opt.state_dict()["channel"]["residuals"], "mbsgd with int8 keeps residuals"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, f"{directory}/mbsgd.rank{rank}.pt")
    torch.save(train("plsgd", comm, averaging_freq=2)[1].state_dict(), f"{directory}/plsgd.rank{rank}.pt")
    _, zero = train("zero2", comm)
    torch.save(zero.state_dict(), f"{directory}/zero2.rank{rank}.pt")
    torch.save(zero.sharded_state_dict(), f"{directory}/zero2.sharded.rank{rank}.pt")
    comm.barrier()


if __name__ == "__main__":
    main()
