"""Your own training algorithm in about 30 lines: `gradavg` averages the gradients over the ranks after
backward, each rank's gradient first clipped to the norm `max_norm` (None: not clipped), so that no
rank's outlier batch dominates a step. A registered CommOptimizer subclass is its options and one rule
(algorithms/README.md, "Registry"); everything else (the initial broadcast, state_dict, comm_stats, the
`codec` option that compresses the average, `mesh=`) comes from the base class.

    mpirun -n 2 python examples/custom_algorithm.py          # this script; as root add --allow-run-as-root
    python -m apps.train --nproc 2 -o algorithm.module=examples.custom_algorithm -o algorithm.name=gradavg \\
        -o algorithm.options.max_norm=1.0 -o train.max_steps=100      # the reference training program

Both from the checkout root: apps.train imports `examples.custom_algorithm` on every rank, which
registers the name (the script part below runs only as a script), and drives it by what the class
declares (`training`, `state_layout`). Run as a script from a checkout, it finds pycomm and algorithms
there."""

from __future__ import annotations

import pathlib
import sys
from typing import Any

import torch

sys.path.append(str(pathlib.Path(__file__).resolve().parents[1]))  # the checkout's packages, unless installed
import algorithms
from algorithms import options, traits


@algorithms.register("gradavg")
class GradAvg(algorithms.CommOptimizer):
    """Synchronous SGD with each rank's gradient clipped before the average."""

    training = traits.WRAPPER  # hooks into the user's loop: loss.backward(); opt.step()
    state_layout = traits.IDENTICAL  # every rank applies the same average: one checkpoint, any ranks
    algorithm_options: dict[str, Any] = {"max_norm": None}  # defaults; `codec` and `bucket_bytes` are added

    def _validate(self, config: dict[str, Any]) -> dict[str, Any]:
        max_norm = config["max_norm"]  # checked before any communication: a clear error, on every rank
        if max_norm is not None and (
            isinstance(max_norm, bool) or not isinstance(max_norm, (int, float)) or max_norm <= 0
        ):
            raise options.OptionError(f"gradavg: max_norm must be a number > 0 or None, got {max_norm!r}")
        return config

    @torch.no_grad()
    def _step(self, loss: float | None) -> None:
        with_grad = [p for p in self.params if p.grad is not None]
        if self.options["max_norm"] is not None:
            torch.nn.utils.clip_grad_norm_(with_grad, self.options["max_norm"])  # this rank's own gradient
        self.channel.allreduce([p.grad for p in with_grad], key="grads")  # the mean over the ranks
        self.optimizer.step()


if __name__ == "__main__":
    import pycomm

    comm = pycomm.init()
    torch.manual_seed(0)  # the same data on every rank; each takes its own part
    x = torch.randn(4096, 10)
    y = x @ torch.arange(10.0) + 1.0 + 0.1 * torch.randn(4096)
    mine = torch.arange(comm.rank, len(x), comm.size)
    model = torch.nn.Linear(10, 1)
    opt = algorithms.CommOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.05), algorithm="gradavg", model=model, max_norm=50.0
    )
    for step in range(1, 201):
        batch = mine[torch.randint(len(mine), (32,))]
        loss = torch.nn.functional.mse_loss(model(x[batch]).squeeze(1), y[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0 and comm.rank == 0:
            print(f"step {step}: loss {loss.item():.4f}")
    print(
        f"rank {comm.rank}: {opt!r}, weights {model.weight.data.view(-1).tolist()}, "
        f"sent {opt.comm_stats()['bytes']} bytes"
    )
