"""Local steps with a parameter average every H steps: the machinery PLSGD and QSR share.

Each rank steps its optimizer locally; when `current_period` steps have passed since the last round,
x_i <- mean_j x_j. Subclasses choose the next H after each round (`_next_period`) and what else a
round averages (`_round_extras`). With a codec, parameters travel as differences from the point of the
last round (identical on every rank).

H is chosen at the start of the run and after each round, from the state at the start of the NEXT step
(`_next_period(t)`, t = steps taken): a scheduler stepped after `opt.step()` has moved the learning rate
by then, so QSR reads the rate of the step about to be taken, as the published code does."""

from __future__ import annotations

from typing import Any

import torch

from algorithms.base import CommOptimizer, clone_all, copy_into


class PeriodicAveraging(CommOptimizer):
    setup_from_parameters = True  # _setup derives its state from the parameters alone

    def _setup(self) -> None:
        self.steps_since_round = 0
        self.rounds = 0
        self.period: int | None = None  # H; None until the next step chooses it (run start, after a round)
        self._last_round = clone_all(self.params) if self.options["codec"] is not None else None

    @property
    def current_period(self) -> int:
        """H of the current period; between a round and the next step, the H that the state now gives."""
        return self.period if self.period is not None else self._next_period(self.steps)

    def _next_period(self, steps: int) -> int:
        """H of the period that starts when `steps` optimizer steps have been taken (0: the first one),
        evaluated just before the next step."""
        raise NotImplementedError

    def _round_extras(self) -> list[torch.Tensor]:
        """Tensors averaged uncompressed with the parameters in each round (buffers, optimizer state)."""
        return []

    def _step(self, loss: float | None) -> None:
        if self.period is None:
            self.period = self._next_period(self.steps)
        self.optimizer.step()
        self.steps_since_round += 1
        if self.steps_since_round >= self.period:
            self.average_now()
            self.period = None

    @torch.no_grad()
    def average_now(self) -> None:
        """One averaging round now (also the last thing to do before evaluating or saving a model)."""
        self._average_params(self._last_round, self._round_extras())
        if self._last_round is not None:
            copy_into(self._last_round, [p.data for p in self.params])
        self.steps_since_round = 0
        self.rounds += 1

    def _algorithm_state(self) -> dict[str, Any]:
        return {
            "steps_since_round": self.steps_since_round,
            "rounds": self.rounds,
            "period": self.period,
            "last_round": self._last_round,
        }

    def _load_algorithm_state(self, state: dict[str, Any]) -> None:
        self.steps_since_round, self.rounds, self.period = state["steps_since_round"], state["rounds"], state["period"]
        if self._last_round is not None:
            if state["last_round"] is None:
                raise ValueError("state was saved without a codec; this optimizer has one")
            copy_into(self._last_round, state["last_round"])
