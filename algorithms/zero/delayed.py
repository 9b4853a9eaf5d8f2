"""zero1 with a staleness bound K (SmolCluster's ZeRO-1 knob): the rule of ssp (docs/algorithms.md,
"Parameter servers and bounded staleness"), on pycomm's collectives.

Step t's gradients are copied into one flat buffer per group and their reduce-scatter is issued
asynchronously; the rank goes on to step t + 1 without waiting for it. At the end of step t, step t - K is
completed: its reduce-scatter waited for, its averaged gradient shard stepped into the master shard (with
the hyper-parameters step t - K had, e.g. its scheduled LR), the parameters all-gathered from the masters.
So the forward of step t + 1 runs on the parameters after exactly t + 1 - K steps: each gradient misses
the K most recent updates (min(K, steps since the last drain), the staleness reported), and

    x_{t+1} = x_t - opt(mean_r g_r(x_{t-K}))

deterministically (every rank completes the same steps in the same order, so the collectives match and
the replicas stay identical). A straggler holds the others back only once they are K steps ahead.
At most K + 1 gradient copies are in flight. clip_grad_norm_ marks the step's gradient for clipping by
its global norm when it is completed (the norm exists only then). `drain()` completes every step taken (checkpoints and
close do it first, so what they save is the parameters after every step taken); K = 0 never comes here
(zero1 as it was)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

import pycomm
from algorithms import clipping
from algorithms.ps.stats import StalenessStats
from algorithms.zero import shard_optimizer


@dataclass
class _InFlight:
    step: int
    works: list[Any]  # one reduce-scatter per group
    shards: list[torch.Tensor]  # the averaged gradient shards, once the works are done
    grads: list[torch.Tensor]  # the flat gradient copies the works read
    hyper: list[dict[str, Any]]  # the user's param_groups' hyper-parameters at this step
    clip: tuple[Any, ...] | None  # clip_grad_norm_'s arguments for this step's gradient, if called


class DelayedSteps:
    """The in-flight steps of one zero1 optimizer (`opt`: its groups, shard optimizer, communicators)."""

    def __init__(self, opt: Any, bound: int) -> None:
        self.opt, self.bound = opt, bound
        self.queue: list[_InFlight] = []
        self.applied = 0  # steps whose update the model's parameters hold
        self.stats = StalenessStats()
        self.clip_next: tuple[Any, ...] | None = None  # set by clip_grad_norm_ between backward and step
        self.last_norm = torch.tensor(float("nan"))  # the global gradient norm of the latest completed step

    @torch.no_grad()
    def launch(self, step: int) -> None:
        """Issue step `step`'s gradient reduction (asynchronous) and note the staleness of its gradient."""
        opt = self.opt
        self.stats.staleness(step - self.applied)
        self.stats.calls += 1
        works, shards, grads = [], [], []
        for g in opt.groups:
            flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in g.params])
            shard = torch.zeros(g.shard_numel, dtype=flat.dtype, device=flat.device)
            opt._count("dp_shard", opt.shard_comm, opt._wire_bytes(flat.numel(), flat.dtype, opt._wire(flat.dtype)))
            work = opt.shard_comm.reduce_scatter_coalesced(
                shard,
                [flat],
                op=pycomm.AVG,
                bucket_bytes=opt.options["bucket_bytes"],
                wire_dtype=opt._wire(flat.dtype),
                codec=opt.options["codec"],
                async_op=True,
            )
            works.append(opt._across_replicas(work, shard))  # hybrid: then averaged over the replicas of the shard
            shards.append(shard)
            grads.append(flat)
        hyper = [shard_optimizer.hyper_parameters(pg) for pg in opt.optimizer.param_groups]
        self.queue.append(_InFlight(step, works, shards, grads, hyper, self.clip_next))
        self.clip_next = None

    def complete_through(self, step: int) -> None:
        """Complete, in order, every in-flight step up to and including `step`."""
        while self.queue and self.queue[0].step <= step:
            self._complete(self.queue.pop(0))

    def drain(self) -> None:
        """Complete every step taken (before a checkpoint is written or read, and at close)."""
        self.complete_through(self.queue[-1].step if self.queue else -1)

    @torch.no_grad()
    def _complete(self, item: _InFlight) -> None:
        opt = self.opt
        for w in item.works:
            w.wait()
        grads = [shard.float() for shard in item.shards]
        if item.clip is not None:  # the global norm exists only now that the step is reduced
            self.last_norm = clipping.clip_grad_norm_(
                grads, *item.clip, comms=opt._norm_comms(), device=opt.channel.device
            )
        for group, grad in zip(opt.groups, grads):
            for i, piece in enumerate(group.shard_params):
                piece.grad = group.piece_of(grad, i)
        for mine, hyper in zip(opt.shard_optimizer.param_groups, item.hyper):
            mine.update(hyper)
        opt.shard_optimizer.step()
        for group in opt.groups:
            for piece in group.shard_params:
                piece.grad = None
        opt._publish()
        self.applied = item.step + 1

    def state_dict(self) -> dict[str, Any]:
        return {"applied": self.applied, "stats": self.stats.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.queue = []
        self.applied = state["applied"]
        self.stats.load_state_dict(state["stats"])
