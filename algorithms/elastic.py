"""What EASGD and LSGD (and their + variants) share: a centre variable, a local pull toward it every
step, and a communication round every `comm_period` steps. Order within one `step()` (docs/algorithms.md):
(1) the wrapped optimizer's step; (2) the local pull x <- (1 - p) x + p c with
p = local_pulling_strength / comm_period; (3) when this is the comm_period-th step since the last
round (steps 1..comm_period, so exactly every comm_period steps), the round. The centre starts as the
initial (broadcast) parameters. The counter starts at 0 (SDTL's started at 1, so its rounds came every
comm_period - 1 steps)."""

from __future__ import annotations

from typing import Any

import torch

import pycomm
from algorithms import options as opts
from algorithms.base import CommOptimizer, clone_all, copy_into


def elastic_(xs: list[torch.Tensor], targets: list[torch.Tensor], a: float) -> None:
    """x <- (1 - a) x + a t for every pair, in place."""
    if a == 0.0:
        return
    torch._foreach_mul_(xs, 1.0 - a)
    torch._foreach_add_(xs, targets, alpha=a)


class ElasticBase(CommOptimizer):
    algorithm_options: dict[str, Any] = {"comm_period": 4, "dist_pulling_strength": 0.5, "local_pulling_strength": 0.0}

    def _validate(self, config: dict[str, Any]) -> dict[str, Any]:
        config["comm_period"] = opts.integer("comm_period", config["comm_period"], 1)
        config["dist_pulling_strength"] = opts.fraction("dist_pulling_strength", config["dist_pulling_strength"])
        config["local_pulling_strength"] = opts.fraction("local_pulling_strength", config["local_pulling_strength"])
        return config

    setup_from_parameters = True  # _setup derives its state from the parameters alone

    def _setup(self) -> None:
        # The centre lives in one flat buffer (self._centre are views of it) when the parameters share a
        # dtype, so that the every-step local pull is one fused pycomm kernel over all parameters.
        dtypes = {p.dtype for p in self.params}
        if len(dtypes) == 1 and next(iter(dtypes)).is_floating_point:
            self._centre_flat: torch.Tensor | None = torch.cat([p.detach().reshape(-1) for p in self.params])
            self._centre = [
                v.view_as(p) for v, p in zip(self._centre_flat.split([p.numel() for p in self.params]), self.params)
            ]
        else:
            self._centre_flat, self._centre = None, clone_all(self.params)
        self.steps_since_round = 0
        self.rounds = 0

    @property
    def current_period(self) -> int:
        return self.options["comm_period"]

    def centre(self) -> list[torch.Tensor]:
        """A copy of the centre variable (EASGD's c; for LSGD the point the local pull goes to, the
        post-communication parameters), one tensor per parameter in the optimizer's order; identical
        on every rank for easgd, easgd+ and lsgd+."""
        return clone_all(self._centre)

    @property
    def _x(self) -> list[torch.Tensor]:
        return [p.data for p in self.params]

    def _before_step(self, loss: float | None) -> None:
        """Statistics the round needs, gathered before the optimizer changes the parameters."""

    def _after_step(self, loss: float | None) -> None:
        """Statistics gathered right after the optimizer step."""

    def _after_pull(self) -> None:
        """Statistics gathered after the local pull (before a round)."""

    def _round(self) -> None:
        raise NotImplementedError

    @torch.no_grad()
    def _step(self, loss: float | None) -> None:
        self._before_step(loss)
        self.optimizer.step()
        self._after_step(loss)
        self._local_pull(self.options["local_pulling_strength"] / self.options["comm_period"])
        self._after_pull()
        self.steps_since_round += 1
        due = self.steps_since_round == self.options["comm_period"]
        self._communicate(due)
        if due:
            self.steps_since_round = 0
            self.rounds += 1

    def _local_pull(self, p: float) -> None:
        if p == 0.0:
            return
        if self._centre_flat is not None:
            # the parameters themselves, not self._x: the kernel writes raw memory (autograd is off
            # here), and fresh .data views per step would cost more than the kernel's cached checks
            pycomm.kernels.elastic_update(self.params, self._centre_flat, p)
        else:
            elastic_(self._x, self._centre, p)

    def _communicate(self, round_due: bool) -> None:
        if round_due:
            self._round()

    def _mean_params(self, reference: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
        """mean_j x_j (the parameters untouched). With a codec, x - r travels (r, the centre unless
        `reference` is given, is identical on every rank) and the mean is r + mean_j (x_j - r)."""
        if self.options["codec"] is None:
            mean = clone_all(self._x)
            self.channel.allreduce(mean, key="params", compress=False)
            return mean
        return self.channel.average_relative(self._x, self._centre if reference is None else reference, key="params")

    def _algorithm_state(self) -> dict[str, Any]:
        return {"centre": clone_all(self._centre), "steps_since_round": self.steps_since_round, "rounds": self.rounds}

    def _load_algorithm_state(self, state: dict[str, Any]) -> None:
        copy_into(self._centre, state["centre"])
        self.steps_since_round, self.rounds = state["steps_since_round"], state["rounds"]
