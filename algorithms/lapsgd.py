"""LAP-SGD and LPP-SGD (Chatterjee, Kungurtsev, Alistarh, arXiv 2203.06638): on every rank P worker
processes train ONE shared model lock-free (Hogwild), while the rank's main process averages the model
across ranks layer by layer without stopping them; LPP-SGD adds partitioned back-propagation.

API. The other algorithms hook into a training loop the user writes (`loss.backward(); opt.step()`);
LAP cannot, because its training happens in P worker processes that each run their own loop. So the
wrapper keeps the one-line construction of every algorithm and owns the loop:

    opt = algorithms.CommOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                   algorithm="lapsgd", comm=comm, num_processes=4, averaging_freq=8)
    result = opt.train(model, loss_fn, train_set, epochs=2, batch_size=64, scheduler=sched)

`step()` raises (it has no meaning here). `train()` may be called repeatedly (e.g. one epoch at a time,
evaluating in between): the node minibatch counter, the averaging counters and every worker's momentum
buffers carry over, and they are in `state_dict()`. The worker processes start with the first call and
sleep between calls; a later call with the same model, loss_fn and dataset objects and settings wakes
them (no start-up), anything else starts new ones. `opt.close()` ends them (else they end with the
optimizer or the program); `LapResult.startup_seconds` says what a call spent starting workers. Hogwild runs are not bit-reproducible, so a resumed
run continues the same schedule and state, not the same trajectory.

What the workers do is torch.optim.SGD's update (lr, momentum, dampening, weight_decay, nesterov per
param group, each worker with its own momentum buffers). The wrapped SGD optimizer supplies those
hyper-parameters and the learning rate: a torch LR scheduler on it is moved by the main process with the
rank's node minibatch counter, and workers read the new rate at their next step. By default
(`scheduler_interval="fractional_epoch"`, the published code's rule) it is set every minibatch to the
fractional epoch = node minibatch counter / len(loader) through `scheduler.step(epoch)`, so the scheduler
is written in epochs and must compute its rate from the epoch alone (LambdaLR, MultiStepLR, StepLR,
CosineAnnealingLR, algorithms.schedules, ...). `"epoch"` steps it at whole epochs only (for schedulers
that need whole epochs); `"step"` once per node minibatch, for schedules written in steps (apps do this). Where
the rate is a function of the minibatch number alone ("fractional_epoch", or "step" with a closed-form
scheduler such as algorithms.schedules'), the main process publishes the rates of the next LR_AHEAD
minibatches and each worker applies the rate of the minibatch it claimed, exactly as the published
code; otherwise workers use the rate last published (the loop polls every `poll_interval`). `loss_fn`, the model class and the dataset must be picklable when workers are
spawned (always on GPU; CPU defaults to fork, whose children never touch the communicator). A spawned
worker re-imports the main module: keep `pycomm.init()` (and any mpi4py import) under
`if __name__ == "__main__":`, or the worker would join the MPI job as if it were a rank."""

from __future__ import annotations

import math
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.utils.data import Dataset

from algorithms import options as opts
from algorithms import traits
from algorithms.base import CommOptimizer
from algorithms.lap.averaging_activity import AveragingPolicy, RankAveraging, layers_of
from algorithms.lap.blocks import partition_blocks
from algorithms.lap.loop import LrSync, RankLoop
from algorithms.lap.pool import WorkerPool
from algorithms.lap.shared import MomentumState
from algorithms.lap.worker import GroupHyper
from algorithms.registry import register


@dataclass
class LapResult:
    steps: int  # node minibatches this rank trained in this call
    per_worker: list[int]  # of which each worker did
    rounds: int  # averaging rounds in this call (the final synchronous one included)
    loss: float  # mean of the workers' last training losses
    seconds: float  # the whole call, worker start-up included
    startup_seconds: float = 0.0  # of which starting the worker processes (0 when the pool was reused)
    mean_staleness: float = 0.0  # updates by other workers between a worker's read and its update


@dataclass(frozen=True)
class _PoolKey:
    objects: tuple  # model, loss_fn, dataset, momentum state: the same objects, not equal ones
    settings: tuple  # compared by value; the last is the node minibatch count the pool stands at

    def matches(self, other: "_PoolKey") -> bool:
        return all(a is b for a, b in zip(self.objects, other.objects)) and self.settings == other.settings


def _seed(seed: int, rank: int, worker: int, node_steps: int) -> int:
    """Distinct sampler/torch seeds per (rank, worker, call): no two workers draw the same batches."""
    return (seed * 1_000_003 + rank * 10_007 + worker * 101 + node_steps) % (2**63)


@register("lapsgd")
class LAPSGD(CommOptimizer):
    training = traits.OWN_LOOP  # P Hogwild worker processes per rank: opt.train(...), not step()
    algorithm_options: dict[str, Any] = {"num_processes": 2, "averaging_freq": 8, "pre_post_steps": 0}

    def _validate(self, config: dict[str, Any]) -> dict[str, Any]:
        config["num_processes"] = opts.integer("num_processes", config["num_processes"], 1)
        config["averaging_freq"] = opts.integer(
            "averaging_freq (node minibatches, not seconds)", config["averaging_freq"], 1
        )
        config["pre_post_steps"] = opts.integer("pre_post_steps", config["pre_post_steps"], 0)
        return config

    def _setup(self) -> None:
        if not isinstance(self.optimizer, torch.optim.SGD):
            raise TypeError(
                f"{self.name} workers apply torch.optim.SGD's update (p -= lr * d_p with their own "
                f"momentum); wrap a torch.optim.SGD, got {type(self.optimizer).__name__}"
            )
        if any(g.get("maximize") for g in self.optimizer.param_groups):
            raise ValueError(f"{self.name}: maximize=True is not supported")
        self.node_steps = 0  # node minibatches trained on this rank (all workers, all calls)
        self.last_averaged_at = 0  # node_steps when this rank last started an averaging round
        self.rounds = 0
        # (summed staleness, updates) of what this process trained, in all and since comm_stats() last ran;
        # not in checkpoints: statistics of this process, as the channel's bytes are
        self._staleness, self._unreported = (0, 0), (0, 0)
        self.momentum: MomentumState | None = None
        self._pool: WorkerPool | None = None
        self._pool_key: _PoolKey | None = None

    @property
    def current_period(self) -> int:
        """Node minibatches between averaging rounds now (1 before pre_post_steps)."""
        return AveragingPolicy(self.options["averaging_freq"], self.options["pre_post_steps"]).freq_at(self.node_steps)

    def step(self, closure: Callable[[], Any] | None = None, loss: Any = None) -> Any:
        raise RuntimeError(
            f"{self.name} trains in {self.options['num_processes']} Hogwild worker processes, "
            "not in your loop: call opt.train(model, loss_fn, dataset, steps=... or epochs=..., "
            "batch_size=...) instead of step()"
        )

    def clip_grad_norm_(
        self, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False, foreach: bool | None = None
    ) -> torch.Tensor:
        raise RuntimeError(
            f"{self.name}'s worker processes compute the gradients, not your loop: give "
            f"max_grad_norm={max_norm} to opt.train(...) to clip each worker step's gradients"
        )

    def _blocks(self, params: list[torch.Tensor]) -> list[tuple[int, int]] | None:
        return None

    def _prepassm_steps(self) -> int:
        return 0

    # -- training --------------------------------------------------------------------------------
    def train(
        self,
        model: torch.nn.Module,
        loss_fn: Callable[[Any, Any], torch.Tensor],
        dataset: Dataset,
        *,
        steps: int | None = None,
        epochs: float | None = None,
        batch_size: int = 64,
        scheduler: Any = None,
        scheduler_interval: str = "fractional_epoch",
        seed: int = 0,
        final_average: bool = True,
        start_method: str | None = None,
        threads_per_worker: int = 1,
        poll_interval: float = 0.01,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
        progress_every: int = 50,
        max_grad_norm: float | None = None,
    ) -> LapResult:
        """Train `model` (whose trainable parameters are the wrapped optimizer's) on this rank's shard of
        `dataset` (items (input, target), or a `batch(indices) -> (inputs, targets)` method as apps' datasets
        have; rank r takes items r, r+size, ...) for `steps` node
        minibatches (all P workers together) or `epochs` passes over the shard, then (final_average)
        average once more with the workers stopped so that all ranks end with the same model.
        `max_grad_norm` clips each worker step's gradients to that total norm (what clip_grad_norm_ does
        in a loop you write). Collective: every rank calls it with the same arguments."""
        t0 = time.monotonic()
        params = self._check_model(model)
        batch_size = opts.integer("batch_size", batch_size, 1)
        threads_per_worker = opts.integer("threads_per_worker", threads_per_worker, 1)
        progress_every = opts.integer("progress_every", progress_every, 1)
        poll_interval = opts.number("poll_interval", poll_interval, 0.0)
        if max_grad_norm is not None:
            max_grad_norm = opts.number("max_grad_norm", max_grad_norm, 0.0)
            if not 0.0 < max_grad_norm < float("inf"):
                raise opts.OptionError(f"max_grad_norm must be a positive finite number, got {max_grad_norm}")
        if not hasattr(dataset, "__len__"):
            raise TypeError(f"dataset: expected a map-style dataset (with __len__), got {type(dataset).__name__}")
        shard = torch.arange(self.comm.rank, len(dataset), self.comm.size)
        if len(shard) == 0:
            raise ValueError(f"dataset: {len(dataset)} items leave rank {self.comm.rank} of {self.comm.size} none")
        steps_per_epoch = math.ceil(len(shard) / batch_size)
        steps = self._budget(steps, epochs, steps_per_epoch)
        device = params[0].device
        if start_method is None:
            start_method = "spawn" if device.type == "cuda" else "fork"
        if device.type == "cpu":
            model.share_memory()  # in place: the optimizer keeps pointing at the same tensors
        if self.node_steps == 0:
            self.channel.broadcast(list(model.buffers()), root=0)
        P = self.options["num_processes"]
        if self.momentum is None:
            self.momentum = MomentumState.zeros(params, P)

        ids = {id(p): g for g, group in enumerate(self.optimizer.param_groups) for p in group["params"]}
        groups = [
            GroupHyper(g["momentum"], g["dampening"], g["weight_decay"], g["nesterov"])
            for g in self.optimizer.param_groups
        ]
        # what the running workers were given (objects by identity, settings by value, and where the last
        # call left off): a call that changes none of it continues them
        key = _PoolKey(
            (model, loss_fn, dataset, self.momentum),
            (batch_size, groups, max_grad_norm, start_method, threads_per_worker, seed, self.node_steps),
        )
        pool = self._reusable_pool(key)
        if pool is None:
            pool = WorkerPool(
                model=model,
                loss_fn=loss_fn,
                dataset=dataset,
                shard=shard,
                batch_size=batch_size,
                groups=groups,
                group_of=[ids[id(p)] for p in params],
                momentum=self.momentum,
                blocks=self._blocks(params),
                prepassm_steps=self._prepassm_steps(),
                seeds=[_seed(seed, self.comm.rank, w, self.node_steps) for w in range(P)],
                device=device,
                start_method=start_method,
                threads=threads_per_worker,
                first_step=self.node_steps,
                steps=steps,
                max_grad_norm=max_grad_norm,
            )
            self._pool = pool
            self._pool_finalizer = weakref.finalize(self, pool.close)
        averaging = None
        if self.comm.size > 1:
            policy = AveragingPolicy(self.options["averaging_freq"], self.options["pre_post_steps"])
            averaging = RankAveraging(self.comm, layers_of(model), policy, self.options["codec"])
        lr_sync = LrSync(self.optimizer, scheduler, scheduler_interval, steps_per_epoch, self.node_steps)
        loop = RankLoop(pool, averaging, lr_sync, self.last_averaged_at, poll_interval, on_progress, progress_every)
        loop.publish_lrs(self.node_steps)
        try:
            pool.begin(self.node_steps + steps)
            loop.run()
        except BaseException:  # also a failed collective: never leave workers training
            self.close()
            raise
        first = self.node_steps
        self.node_steps = pool.done()
        # the next call continues these workers if it changes nothing they were given but the budget
        self._pool_key = _PoolKey(key.objects, (*key.settings[:-1], self.node_steps))
        self.last_averaged_at = loop.last_averaged_at
        self.steps = self.node_steps
        rounds = 0
        if averaging is not None:
            rounds = averaging.rounds
            self.channel.stats.bytes += averaging.bytes
            self.channel.stats.seconds += averaging.seconds
            self.channel.stats.calls += averaging.rounds
            if final_average:
                # workers stopped: a plain all-reduce AVG gives every rank bitwise the same model (the
                # non-blocking apply x + (a - s) with x == s could differ by an ulp per rank)
                self._average_params(None, [b for b in model.buffers() if b.is_floating_point()])
                self.last_averaged_at = self.node_steps
                rounds += 1
        self.rounds += rounds
        done, stale, per_worker = self.node_steps - first, pool.staleness_sum(), pool.per_worker()
        self._staleness = (self._staleness[0] + stale, self._staleness[1] + done)
        self._unreported = (self._unreported[0] + stale, self._unreported[1] + done)
        losses = [x for x, n in zip(pool.losses(), per_worker) if n]
        return LapResult(
            done,
            per_worker,
            rounds,
            sum(losses) / len(losses) if losses else math.nan,
            time.monotonic() - t0,
            pool.startup_seconds,
            stale / done if done else 0.0,
        )

    def _reusable_pool(self, key: tuple) -> WorkerPool | None:
        """The running pool when it was started for `key` (compared by identity for objects), else None
        (after closing any pool that cannot be reused)."""
        pool = self._pool
        if pool is None:
            return None
        if self._pool_key is not None and key.matches(self._pool_key) and pool.alive():
            return pool
        self.close()
        return None

    def close(self) -> None:
        """Stop this optimizer's worker processes (they otherwise wait for the next train() call, and end
        with the optimizer or the program)."""
        if self._pool is not None:
            self._pool_finalizer.detach()
            self._pool.close()
            self._pool, self._pool_key = None, None

    def _check_model(self, model: torch.nn.Module) -> list[torch.Tensor]:
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
        params = [p for p in model.parameters() if p.requires_grad]
        if {id(p) for p in params} != {id(p) for p in self.params}:
            raise ValueError("model: its trainable parameters must be exactly those of the wrapped optimizer")
        if len({p.device for p in params}) != 1:
            raise ValueError(
                f"model: all parameters must be on one device, got {sorted({str(p.device) for p in params})}"
            )
        return params

    @staticmethod
    def _budget(steps: int | None, epochs: float | None, steps_per_epoch: int) -> int:
        if (steps is None) == (epochs is None):
            raise ValueError("train: give exactly one of steps= (node minibatches) or epochs=")
        if steps is not None:
            return opts.integer("steps", steps, 0)
        return round(opts.number("epochs", epochs, 0.0) * steps_per_epoch)

    def comm_stats(self) -> dict[str, Any]:
        """The channel's bytes, seconds and calls; `mean_staleness` over every update of this optimizer
        (this process's; not in checkpoints) and `step_metrics.staleness_mean` over the updates since the
        previous call (None when none), as the parameter servers report theirs (apps log both)."""
        (total, count), (stale, updates) = self._staleness, self._unreported
        self._unreported = (0, 0)
        return {
            **super().comm_stats(),
            "mean_staleness": total / count if count else 0.0,
            "step_metrics": {"staleness_mean": stale / updates if updates else None},
        }

    # -- checkpoints ------------------------------------------------------------------------------
    def _algorithm_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "node_steps": self.node_steps,
            "last_averaged_at": self.last_averaged_at,
            "rounds": self.rounds,
            "momentum": None,
        }
        if self.momentum is not None:
            state["momentum"] = {
                "buffers": [[b.detach().clone() for b in row] for row in self.momentum.buffers],
                "ready": self.momentum.ready.clone(),
            }
        return state

    def _load_algorithm_state(self, state: dict[str, Any]) -> None:
        self.node_steps, self.last_averaged_at = state["node_steps"], state["last_averaged_at"]
        self.rounds = state["rounds"]
        self.momentum = None
        saved = state["momentum"]
        if saved is not None:
            if len(saved["buffers"]) != self.options["num_processes"]:
                raise ValueError(
                    f"state holds momentum of {len(saved['buffers'])} workers; this optimizer "
                    f"has num_processes={self.options['num_processes']}"
                )
            device = self.params[0].device
            buffers = [[b.to(device).clone() for b in row] for row in saved["buffers"]]
            self.momentum = MomentumState(buffers, saved["ready"].clone())
            self.momentum.share_memory_()


@register("lppsgd")
class LPPSGD(LAPSGD):
    """LAP-SGD plus partitioned back-propagation: from node minibatch `prepassm_steps` on, each worker
    alternates a full step with one that back-propagates into (and updates) only its own block of the
    parameter list (P contiguous blocks balanced by element count)."""

    algorithm_options: dict[str, Any] = {**LAPSGD.algorithm_options, "prepassm_steps": 0}

    def _validate(self, config: dict[str, Any]) -> dict[str, Any]:
        config = super()._validate(config)
        config["prepassm_steps"] = opts.integer("prepassm_steps", config["prepassm_steps"], 0)
        return config

    def _setup(self) -> None:
        super()._setup()
        if len(self.params) < self.options["num_processes"]:
            raise opts.OptionError(
                f"num_processes: lppsgd gives each worker a non-empty block of the "
                f"{len(self.params)} parameter tensors; use at most {len(self.params)} processes"
            )

    def _blocks(self, params: list[torch.Tensor]) -> list[tuple[int, int]]:
        return partition_blocks([p.numel() for p in params], self.options["num_processes"])

    def _prepassm_steps(self) -> int:
        return self.options["prepassm_steps"]
