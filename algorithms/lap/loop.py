"""The main process of one rank while its workers train: learning-rate schedule, progress reports and
the averaging activity, until every rank's workers have spent their budget.

The loop never blocks the workers. It issues collectives only on decisions all ranks share (the agreed
counters), so every rank submits the same sequence: check, [round], check, ... With one rank there is
nothing to average and the loop only follows the workers."""

from __future__ import annotations

import inspect
import math
import time
import warnings
from typing import Any, Callable

import torch

from algorithms.lap.averaging_activity import Agreement, RankAveraging
from algorithms.lap.pool import WorkerPool
from algorithms.lap.shared import LR_AHEAD

# "fractional_epoch" (the published code's and the default): every minibatch the scheduler is set to
# epoch = node minibatch counter / len(loader), a fraction, through torch's step(epoch), so it must
# compute its rate from last_epoch alone (LambdaLR, MultiStepLR, StepLR, CosineAnnealingLR, LinearLR,
# algorithms.schedules, ...). "epoch": stepped once per whole epoch (for schedulers that need whole epochs).
# "step": one step per node minibatch, for schedules written in steps (apps' schedules); a scheduler
# with a closed form (torch's `_get_closed_form_lr`, algorithms.schedules) is set to the minibatch number.
SCHEDULER_INTERVALS = ("fractional_epoch", "epoch", "step")


def _quietly(step: Callable[[], None]) -> None:
    with warnings.catch_warnings():  # the workers step, never optimizer.step(); step(epoch) is deprecated
        warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler.step\(\)`")
        warnings.filterwarnings("ignore", message=r"Seems like `optimizer.step\(\)` has been overridden")
        warnings.filterwarnings("ignore", message=r"The epoch parameter in `scheduler.step\(\)`")
        step()


def _takes_epoch(scheduler: Any) -> bool:
    return "epoch" in inspect.signature(scheduler.step).parameters and not isinstance(
        scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau
    )


class LrSync:
    """Moves a torch LR scheduler with the rank's node minibatch counter (epoch = counter / len(loader);
    see SCHEDULER_INTERVALS) and publishes the optimizer's per-group learning rates to the workers.
    When the rate is a function of the minibatch number alone (`per_minibatch`), `lrs(k)` may be asked
    for any k, in any order (the loop publishes rates ahead of the workers)."""

    def __init__(
        self, optimizer: torch.optim.Optimizer, scheduler: Any, interval: str, steps_per_epoch: int, node_steps: int
    ):
        if interval not in SCHEDULER_INTERVALS:
            raise ValueError(f"scheduler_interval: expected one of {SCHEDULER_INTERVALS}, got {interval!r}")
        if scheduler is not None and not hasattr(scheduler, "step"):
            raise TypeError(f"scheduler: expected a torch LR scheduler (with step()), got {type(scheduler).__name__}")
        if scheduler is not None and interval == "fractional_epoch" and not _takes_epoch(scheduler):
            raise TypeError(
                f"scheduler: {type(scheduler).__name__}.step() takes no epoch, which "
                "scheduler_interval='fractional_epoch' sets every minibatch; give a scheduler that "
                "computes its rate from the epoch (e.g. LambdaLR) or scheduler_interval='epoch'/'step'"
            )
        self.optimizer, self.scheduler, self.interval = optimizer, scheduler, interval
        self.steps_per_epoch = steps_per_epoch
        self.per_minibatch = scheduler is not None and (
            interval == "fractional_epoch"
            or (interval == "step" and _takes_epoch(scheduler) and hasattr(scheduler, "_get_closed_form_lr"))
        )
        self.mark = self._position(node_steps)  # the scheduler is in step with the counter on entry
        if self.per_minibatch:
            self._set(node_steps)

    def _position(self, node_steps: int) -> int:
        return node_steps // self.steps_per_epoch if self.interval == "epoch" else node_steps

    def _set(self, node_steps: int) -> None:
        epoch = node_steps / self.steps_per_epoch if self.interval == "fractional_epoch" else node_steps
        _quietly(lambda: self.scheduler.step(epoch))
        self.mark = node_steps

    def lrs(self, node_steps: int) -> list[float]:
        """The per-group rates for the node minibatch that comes after `node_steps` of them."""
        if self.per_minibatch:
            if self.mark != node_steps:
                self._set(node_steps)
        elif self.scheduler is not None:
            while self.mark < self._position(node_steps):
                _quietly(self.scheduler.step)
                self.mark += 1
        return [float(g["lr"]) for g in self.optimizer.param_groups]


class RankLoop:
    def __init__(
        self,
        pool: WorkerPool,
        averaging: RankAveraging | None,
        lr_sync: LrSync,
        last_averaged_at: int,
        poll_interval: float,
        on_progress: Callable[[dict[str, Any]], None] | None,
        progress_every: int,
    ):
        self.pool, self.averaging, self.lr_sync = pool, averaging, lr_sync
        self.last_averaged_at = last_averaged_at
        self.poll_interval = poll_interval
        self.on_progress, self.progress_every = on_progress, progress_every
        self.reported = pool.done()
        self.published = pool.done()  # rates of node minibatches below this are in the pool's table

    def run(self) -> None:
        """Follow the workers to the end; raise (on every rank) if a worker failed anywhere."""
        failure: str | None = None
        agreed: Agreement | None = None
        while True:
            failure = failure or self.pool.failure()
            if self.averaging is None:
                if failure is not None or self.pool.finished():
                    break
            elif self.averaging.poll_round():
                finished = self.pool.finished()  # read before done: finished implies done is final
                done = self.pool.done()
                agreed = self.averaging.agree(done, self.last_averaged_at, finished, failure is not None)
                if agreed.any_failed or agreed.all_finished:
                    break
                if self.averaging.policy.due(agreed.max_done, agreed.min_last):
                    self.last_averaged_at = done
                    self.averaging.start_round()
                    continue
            self.tick()
            time.sleep(self.poll_interval)
        if failure is not None or (agreed is not None and agreed.any_failed):
            self.pool.stop()
            self.pool.join()
            raise RuntimeError(
                failure or "a LAP worker on another rank failed (see that rank's error); this rank stopped its workers"
            )
        self.tick()

    def publish_lrs(self, done: int) -> list[float]:
        """Publish the rates after `done` node minibatches and, for a per-minibatch schedule, those of the
        next LR_AHEAD (each worker reads the rate of the minibatch it claims); the rates now. Other
        schedules ("epoch", "step") are followed as the main process polls the counter."""
        if self.lr_sync.per_minibatch:
            ahead = min(done + LR_AHEAD, self.pool.target())  # never past this call's budget
            for k in range(max(self.published, done), ahead):
                self.pool.publish_lrs(k, self.lr_sync.lrs(k))
            self.published = max(self.published, ahead)
        lrs = self.lr_sync.lrs(done)
        self.pool.set_lrs(lrs)
        return lrs

    def tick(self) -> None:
        """Publish the learning rates; report progress when due."""
        done = self.pool.done()
        lrs = self.publish_lrs(done)
        if self.on_progress is not None and done - self.reported >= self.progress_every:
            self.reported = done
            losses = [x for x, n in zip(self.pool.losses(), self.pool.per_worker()) if n]
            self.on_progress(
                {
                    "step": done,
                    "epoch": done / self.lr_sync.steps_per_epoch,
                    "lr": lrs[0],
                    "loss": sum(losses) / len(losses) if losses else math.nan,
                    "rounds": self.averaging.rounds if self.averaging else 0,
                }
            )
