"""PLSGD: periodic (post-)local SGD. H = 1 for the first `pre_post_steps` steps, then
H = `averaging_freq`; every H local steps x_i <- mean_j x_j, floating-point buffers (BatchNorm
statistics) averaged too. Momentum buffers stay local."""

from __future__ import annotations

from typing import Any

import torch

from algorithms import options as opts
from algorithms.periodic import PeriodicAveraging
from algorithms.registry import register


@register("plsgd")
class PLSGD(PeriodicAveraging):
    across_shards = True  # elementwise on the parameters: also over ZeRO's master shards across replicas
    algorithm_options: dict[str, Any] = {"averaging_freq": 8, "pre_post_steps": 0}

    def _validate(self, config: dict[str, Any]) -> dict[str, Any]:
        config["averaging_freq"] = opts.integer("averaging_freq", config["averaging_freq"], 1)
        config["pre_post_steps"] = opts.integer("pre_post_steps", config["pre_post_steps"], 0)
        return config

    def _next_period(self, steps: int) -> int:
        return 1 if steps < self.options["pre_post_steps"] else self.options["averaging_freq"]

    def _round_extras(self) -> list[torch.Tensor]:
        return self.float_buffers()
