"""Local steps with a parameter average every H steps: the machinery PLSGD and QSR share.

Each rank steps its optimizer locally; when `current_period` steps have passed since the last round,
x_i <- mean_j x_j. Subclasses choose the next H after each round (`_next_period`) and what else a
round averages (`_round_extras`). With a codec, parameters travel as differences from the point of the
last round (identical on every rank)."""
from __future__ import annotations

from typing import Any

import torch

from algorithms.base import CommOptimizer, clone_all, copy_into


class PeriodicAveraging(CommOptimizer):
    def _setup(self) -> None:
        self.steps_since_round = 0
        self.rounds = 0
        self.period = self._first_period()
        self._last_round = clone_all(self.params) if self.options["codec"] is not None else None

    @property
    def current_period(self) -> int:
        return self.period

    def _first_period(self) -> int:
        raise NotImplementedError

    def _next_period(self, steps: int) -> int:
        """H after a round that ended when `steps` optimizer steps had been taken."""
        raise NotImplementedError

    def _round_extras(self) -> list[torch.Tensor]:
        """Tensors averaged uncompressed with the parameters in each round (buffers, optimizer state)."""
        return []

    def _step(self, loss: float | None) -> None:
        self.optimizer.step()
        self.steps_since_round += 1
        if self.steps_since_round >= self.period:
            self.average_now()
            self.period = self._next_period(self.steps + 1)

    @torch.no_grad()
    def average_now(self) -> None:
        """One averaging round now (also the last thing to do before evaluating or saving a model)."""
        self._average_params(self._last_round, self._round_extras())
        if self._last_round is not None:
            copy_into(self._last_round, [p.data for p in self.params])
        self.steps_since_round = 0
        self.rounds += 1

    def _algorithm_state(self) -> dict[str, Any]:
        return {"steps_since_round": self.steps_since_round, "rounds": self.rounds, "period": self.period,
                "last_round": self._last_round}

    def _load_algorithm_state(self, state: dict[str, Any]) -> None:
        self.steps_since_round, self.rounds, self.period = state["steps_since_round"], state["rounds"], state["period"]
        if self._last_round is not None:
            if state["last_round"] is None:
                raise ValueError("state was saved without a codec; this optimizer has one")
            copy_into(self._last_round, state["last_round"])
