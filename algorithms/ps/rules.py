"""The servers' update rules (docs/algorithms.md "Parameter servers and bounded staleness"), apart from
the transport: what a push does to the server's model and who gets an answer.

asyncps: each gradient is applied at once, the step scaled by 1 / (1 + s) with s = server version - the
  version the worker computed it on (with staleness_correction="momentum", the default, the server's
  momentum lowered by s / (1 + s) for that step: stale_steps.py); with a bound K, s > K is rejected (counted) and the worker is told to
  pull. Each applied gradient is one version.
syncps: a round waits for one gradient from every live worker (a worker that sends none within
  worker_timeout is named late and the round continues without it), averages them in rank order, steps
  (one version), and every worker of the round pulls the new parameters. Every k rounds the parameters are
  blended with the mean of the period's iterates (Polyak averaging): x <- a * mean + (1 - a) * x, so the
  workers that pull them get x_w <- a * x_polyak + (1 - a) * x_w.
A step uses the learning rates the pushing worker's optimizer had for that step (its scheduler's)."""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from algorithms.ps import payload
from algorithms.ps.stale_steps import momentum_lowered, stale_scale
from algorithms.ps.stats import StalenessStats


@dataclass
class Reply:
    worker: int
    kind: str
    header: dict[str, Any]
    with_params: bool


@dataclass
class ServerModel:
    """The parameters the server owns, the optimizer that steps them, and the version counter."""

    params: list[torch.Tensor]
    optimizer: torch.optim.Optimizer
    version: int = 0

    @torch.no_grad()
    def step(self, grad: torch.Tensor, lrs: list[float] | None, scale: float = 1.0) -> None:
        offset = 0
        for p in self.params:
            p.grad = grad[offset : offset + p.numel()].view_as(p).to(p.dtype).clone()
            offset += p.numel()
        groups = self.optimizer.param_groups
        saved = [g["lr"] for g in groups]
        for g, lr in zip(groups, lrs if lrs is not None else saved):
            g["lr"] = lr * scale
        self.optimizer.step()
        for g, lr in zip(groups, saved):
            g["lr"] = lr
        self.version += 1

    def vector(self) -> torch.Tensor:
        return payload.flatten(self.params)


def _unknown_version(worker: int, stats: StalenessStats) -> Reply:
    """A gradient computed on a version this server never had (one from before its restart, resumed from
    an older checkpoint): not applied (a step scaled by 1 / (1 + s) with s < 0 would be reversed or
    unbounded); counted as rejected, and the worker pulls this server's parameters."""
    stats.rejected += 1
    return Reply(worker, "ack", {"rejected": True, "staleness": 0}, True)


class AsyncRule:
    def __init__(
        self,
        model: ServerModel,
        stats: StalenessStats,
        bound: int | None,
        log: Callable[[str], None],
        correction: str | None = None,
    ):
        self.model, self.stats, self.bound, self.log, self.correction = model, stats, bound, log, correction

    def push(self, worker: int, header: dict[str, Any], grad: torch.Tensor, live: set[int]) -> list[Reply]:
        s = self.model.version - int(header["version"])
        if s < 0:
            return [_unknown_version(worker, self.stats)]
        self.stats.staleness(s)
        if self.bound is not None and s > self.bound:
            self.stats.rejected += 1
            return [Reply(worker, "ack", {"rejected": True, "staleness": s}, True)]
        lowered = momentum_lowered(self.model.optimizer, s) if self.correction == "momentum" else nullcontext()
        with lowered:
            self.model.step(grad, header.get("lrs"), stale_scale(s))
        return [Reply(worker, "ack", {"rejected": False, "staleness": s}, bool(header.get("pull")))]

    def pending(self, worker: int) -> bool:
        return False

    def lost(self, worker: int, live: set[int]) -> list[Reply]:
        return []

    def tick(self, live: set[int]) -> list[Reply]:
        return []

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


@dataclass
class _Round:
    grads: dict[int, torch.Tensor] = field(default_factory=dict)
    lrs: list[float] | None = None
    started: float = 0.0


class SyncRule:
    def __init__(
        self,
        model: ServerModel,
        stats: StalenessStats,
        period: int,
        alpha: float,
        timeout: float,
        log: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ):
        self.model, self.stats, self.period, self.alpha, self.timeout = model, stats, period, alpha, timeout
        self.log, self.clock = log, clock
        self.round = _Round()
        self.window_sum: torch.Tensor | None = None  # sum of this period's iterates (Polyak)
        self.window_count = 0

    def push(self, worker: int, header: dict[str, Any], grad: torch.Tensor, live: set[int]) -> list[Reply]:
        s = self.model.version - int(header["version"])
        if s < 0:
            return [_unknown_version(worker, self.stats)]
        if s > 0:  # computed for a round that closed without it (the worker was late): not applied
            self.stats.staleness(s)
            self.stats.rejected += 1
            return [Reply(worker, "ack", {"rejected": True, "staleness": s}, True)]
        self.stats.staleness(0)
        if not self.round.grads:
            self.round.started = self.clock()
            self.round.lrs = header.get("lrs")
        self.round.grads[worker] = grad
        return self._complete_if_ready(live)

    def pending(self, worker: int) -> bool:
        """Whether the worker's gradient waits in the open round (its answer comes when the round closes)."""
        return worker in self.round.grads

    def lost(self, worker: int, live: set[int]) -> list[Reply]:
        return self._complete_if_ready(live)

    def tick(self, live: set[int]) -> list[Reply]:
        """Close a round that has waited worker_timeout for its late workers, naming them."""
        if self.round.grads and self.clock() - self.round.started > self.timeout:
            late = sorted(live - set(self.round.grads))
            if late:
                self.log(
                    f"round {self.model.version}: worker(s) {', '.join(map(str, late))} late (no gradient "
                    f"within worker_timeout={self.timeout:g} s); continuing with "
                    f"{', '.join(map(str, sorted(self.round.grads)))}"
                )
            return self._close()
        return []

    def _complete_if_ready(self, live: set[int]) -> list[Reply]:
        if self.round.grads and live <= set(self.round.grads):
            return self._close()
        return []

    @torch.no_grad()
    def _close(self) -> list[Reply]:
        workers = sorted(self.round.grads)
        mean = torch.stack([self.round.grads[w] for w in workers]).mean(0)
        self.model.step(mean, self.round.lrs)
        x = self.model.vector()
        self.window_sum = x.clone() if self.window_sum is None else self.window_sum.add_(x)
        self.window_count += 1
        if self.model.version % self.period == 0:
            polyak = self.window_sum / self.window_count
            payload.unflatten_into(self.alpha * polyak + (1 - self.alpha) * x, self.model.params)
            self.window_sum, self.window_count = None, 0
        self.round = _Round()
        return [Reply(w, "ack", {"rejected": False, "staleness": 0}, True) for w in workers]

    def state_dict(self) -> dict[str, Any]:
        return {"window_sum": self.window_sum, "window_count": self.window_count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.window_sum, self.window_count = state["window_sum"], state["window_count"]
