"""Local SGD / local AdamW with the Quadratic Synchronization Rule (Gu et al., ICLR 2024).

H is chosen at the start of the run and right after each round, at t steps taken, from eta_t, the
learning rate of step t + 1 (param group 0):

    H = h_base                                                     if t < warmup_steps or alpha == 0
    H = max(min(max(floor((alpha / eta_t) ** gamma), h_min), T - t), 1)   otherwise

(T = total_steps; without it there is no T - t cap; h_min defaults to h_base). The first period comes
from the rule at t = 0. As in the published code, whose scheduler has already advanced when it
recomputes H, eta_t is the rate of the NEXT step: pycomm reads it at the start of that step, so a
scheduler stepped after `opt.step()` (or before it) gives the published H sequence. gamma defaults to 2
(the published code's 1.0 is not QSR). A round averages the parameters, and with `avg_m` / `avg_v`
AdamW's exp_avg / exp_avg_sq; SGD momentum stays local. Buffers are not averaged by rounds: call
`average_buffers()` (after re-estimating BatchNorm statistics) before evaluation.

The rule and its options live here once (PERIOD_OPTIONS, check_period_options, period): DiLoCo's
`inner_steps="qsr"` takes its periods from the same function."""

from __future__ import annotations

import math
from typing import Any, Mapping

import torch

from algorithms import options as opts
from algorithms.periodic import PeriodicAveraging
from algorithms.registry import register

# QSR's period options and their defaults
PERIOD_OPTIONS: dict[str, Any] = {
    "h_base": 4,
    "alpha": 0.0175,
    "gamma": 2.0,
    "h_min": None,
    "warmup_steps": 0,
    "total_steps": None,
}


def check_period_options(config: dict[str, Any]) -> dict[str, Any]:
    """Checks and normalises PERIOD_OPTIONS' values in `config` (h_min None becomes h_base)."""
    config["h_base"] = opts.integer("h_base", config["h_base"], 1)
    config["alpha"] = opts.number("alpha", config["alpha"], 0.0)
    config["gamma"] = opts.number("gamma", config["gamma"], 0.0)
    config["h_min"] = opts.integer("h_min", config["h_base"] if config["h_min"] is None else config["h_min"], 1)
    config["warmup_steps"] = opts.integer("warmup_steps", config["warmup_steps"], 0)
    config["total_steps"] = opts.optional_integer("total_steps", config["total_steps"], 1)
    return config


def period(o: Mapping[str, Any], steps: int, lr: float) -> int:
    """QSR's H for the period that starts when `steps` steps have been taken, from `lr`, the learning rate
    of the next step; `o` holds PERIOD_OPTIONS as check_period_options left them."""
    if steps < o["warmup_steps"] or o["alpha"] == 0:
        return o["h_base"]
    remaining = None if o["total_steps"] is None else o["total_steps"] - steps
    if lr <= 0.0:  # (alpha / 0) ** gamma is unbounded: the rest of the run, or h_min without a total
        return max(remaining, 1) if remaining is not None else o["h_min"]
    h = max(math.floor((o["alpha"] / lr) ** o["gamma"]), o["h_min"])
    if remaining is not None:
        h = min(h, remaining)
    return max(h, 1)


@register("qsr")
class QSR(PeriodicAveraging):
    across_shards = True  # elementwise on the parameters (and Adam's moments): also over ZeRO's master shards
    algorithm_options: dict[str, Any] = {**PERIOD_OPTIONS, "avg_m": False, "avg_v": False}

    def _validate(self, config: dict[str, Any]) -> dict[str, Any]:
        config = check_period_options(config)
        config["avg_m"] = opts.flag("avg_m", config["avg_m"])
        config["avg_v"] = opts.flag("avg_v", config["avg_v"])
        adam = isinstance(self.torch_optimizer, (torch.optim.Adam, torch.optim.AdamW))
        if (config["avg_m"] or config["avg_v"]) and not adam:
            raise opts.OptionError(
                f"avg_m / avg_v average Adam's exp_avg / exp_avg_sq; the wrapped optimizer is "
                f"{type(self.torch_optimizer).__name__}"
            )
        return config

    def _next_period(self, steps: int) -> int:
        return period(self.options, steps, float(self.optimizer.param_groups[0]["lr"]))

    def _round_extras(self) -> list[torch.Tensor]:
        keys = [k for k, on in (("exp_avg", self.options["avg_m"]), ("exp_avg_sq", self.options["avg_v"])) if on]
        return [self._param_state(p)[k] for k in keys for p in self.params if k in self._param_state(p)]
